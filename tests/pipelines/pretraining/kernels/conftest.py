"""Real document pools for the kernel tests: the pydoc corpus (always there) and Wikipedia + two books."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bertstream.pipelines.inputs.read import DocumentBatch, read_documents
from bertstream.pipelines.pretraining.instances import Pool, document_key
from bertstream.pipelines.pretraining.segment import segment_documents
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer.load import load_tokenizer
from tests.conftest import shared_path


def build_pool(files: list[tuple[Path, str]], vocab_txt: Path, seed: int = 7):
    """Read, segment and tokenize ``(path, format)`` files into a pool ordered by seeded key; and the vocab."""
    spec = load_tokenizer(str(vocab_txt))
    docs = []
    for path, fmt in files:
        docs.extend(read_documents(str(path), fmt, Counter()))
    sentences, _ = segment_documents(DocumentBatch(docs))
    batch = DocumentTokenizer(spec)(sentences, Counter())
    keys = np.asarray([document_key(seed, d) for d in batch.doc_ids], dtype=np.uint64)
    return Pool.build(keys, batch.doc_sentences, batch.sentence_lengths, batch.ids), spec.vocab


@pytest.fixture(scope="session")
def demo_pool(demo_corpus, demo_vocab):
    return build_pool([(p, "text") for p in sorted(demo_corpus.glob("*.txt"))], demo_vocab / "vocab.txt")


@pytest.fixture(scope="session")
def wiki_books_pool(wiki_vocab):
    """Two Wikipedia files (over a hundred articles, a few of one sentence), BERT's sample text (short
    documents) and two whole novels (one document of thousands of sentences each) in one pool, as a real
    group mixes them."""
    wiki = shared_path("pretrain", "wikipedia")
    books = shared_path("pretrain", "gutenberg")
    files = [
        (wiki / "wiki_00", "wikiextractor"),
        (wiki / "wiki_01", "wikiextractor"),
        (shared_path("pretrain", "sample_text.txt"), "sentences"),
        (books / "11-0.txt", "text"),
        (books / "84-0.txt", "text"),
    ]
    return build_pool(files, wiki_vocab / "vocab.txt")
