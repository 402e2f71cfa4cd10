"""The reader's documents and the segmenter's sentences of all the shared text, pinned as sha256 digests.

The read and segment stages were rewritten for speed with the promise of the same output, to the byte; the
pins were taken with the code before that rewrite (commit b6b896c), on every shared pretraining file: the
Wikipedia extracts and Gutenberg books (English) and the Chinese Wikipedia and CLUECorpusSmall files. A pin
changes only with a deliberate change of segmentation or reading (say so in the commit).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter

import pytest

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.inputs.read import DocumentBatch, read_documents
from bertstream.pipelines.inputs.resolve import resolve_inputs
from bertstream.pipelines.pretraining.segment import scan_documents, segment_documents
from bertstream.pipelines.pretraining.segmenter import split_sentences
from tests.conftest import SHARED

PRETRAIN = SHARED / "pretrain"
# input pattern -> (documents digest, sentences digest, counters digest)
INPUTS = {
    "english": [f"wikiextractor:{PRETRAIN}/wikipedia/*", f"text:{PRETRAIN}/gutenberg/*.txt"],
    "chinese": [
        f"wikiextractor:{PRETRAIN}/chinese/zhwiki/wiki_00",
        f"jsonl:{PRETRAIN}/chinese/wiki_zh_2019/wiki_00",
        f"lines:{PRETRAIN}/chinese/CLUECorpusSmall_sampled.txt",
        f"sentences:{PRETRAIN}/chinese/CLUECorpusSmall_bert_sampled.txt",
    ],
}
PINS = {
    "english": ("4b5fc09b40c2057b", "36321c955b4d3776", "1ce206c0903fbeb8"),
    "chinese": ("8dcb38dfcd35a900", "073a620fbcf7128f", "f301260a1bc75df0"),
}


def digests(patterns: list[str]) -> tuple[str, str, str]:
    """sha256 (16 hex digits) of the documents as read, of their sentences, and of the read counters.

    A document's id starts with its file's path; the digests take it relative to the shared folder, so the
    pins hold wherever the checkout (and the shared data beside it) lives."""
    root = f"{PRETRAIN}/"
    docs_h, sents_h = hashlib.sha256(), hashlib.sha256()
    counters: Counter = Counter()
    for f in resolve_inputs(patterns, "sentences"):
        docs = list(read_documents(f.path, f.format, counters))
        for d in docs:
            docs_h.update(f"{_relative(d.doc_id, root)}\x02{int(d.presegmented)}\x02".encode())
            docs_h.update("\x01".join(d.paragraphs).encode("utf-8", "surrogatepass") + b"\x00")
        sentences, _ = segment_documents(DocumentBatch(docs))
        for doc_id, ss in sentences:
            sents_h.update(f"{_relative(doc_id, root)}\x02".encode())
            sents_h.update("\x01".join(ss).encode("utf-8", "surrogatepass") + b"\x00")
    counts = ",".join(f"{k}={v}" for k, v in sorted(counters.items()))
    return docs_h.hexdigest()[:16], sents_h.hexdigest()[:16], hashlib.sha256(counts.encode()).hexdigest()[:16]


def _relative(doc_id: str, root: str) -> str:
    assert doc_id.startswith(root), doc_id
    return doc_id[len(root) :]


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_reading_and_segmentation_are_pinned(name: str) -> None:
    if not PRETRAIN.is_dir():
        pytest.skip(f"shared data not found at {PRETRAIN}")
    assert digests(INPUTS[name]) == PINS[name]


def test_batches_split_like_each_paragraph_alone() -> None:
    # The compiled scan of a whole batch against the pure-Python reference, paragraph by paragraph: the
    # regex's backtracking at a paragraph's end, closers, citations, brackets, abbreviations, CJK.
    pieces = [
        ".", "!", "?", "…", "。", "！", "？", "；", "」", "』", "”", "’", "»", '"', "'", ")", "(", "(1", ":12",
        ":xi", ":4-5", " ", "  ", "\t", "\u00a0", "a", "A", "Mr", "St", "U.S", "Inc", "Co", "No", "5", "12", "e.g",
        "Word", "The", "iPhone", "，", "、", "中", "文", "-", "/", "...", ". . .", "etc", "Conn", "\n", "É", "ß",
        "123", "—", "“", "[", "vs", "Jan", "J", "x" * 50, "?!", "²", "١٢", "\U0001d400", "tea-time", "km/h",
        "then-Gov", "Calif", "CALIF", "mr", "_it_", "\u212a", "Kan", "pp",
    ]  # fmt: skip
    rng = random.Random(7)
    docs = []
    for _ in range(3000):
        paragraphs = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 16))) for _ in range(rng.randint(0, 5))]
        docs.append([p.strip() for p in paragraphs] if rng.random() < 0.7 else paragraphs)
    expected = [[s for p in d for s in split_sentences(p)] for d in docs]
    for i in range(0, len(docs), 100):  # batches of 100 documents, and each document alone
        assert scan_documents(docs[i : i + 100]) == expected[i : i + 100]
    for d, e in zip(docs[:300], expected):
        assert scan_documents([d]) == [e], d
    assert scan_documents([["An emoji \U0001f600. Then more."]]) == [["An emoji \U0001f600.", "Then more."]]


def _reference_block_lines(offset: int, raw: bytes, counters: Counter) -> list:
    """``block_lines`` as it was before the per-byte work (commit b6b896c): both regexes on every block, the
    bytes split for the offsets, every line with a CR through ``_split_carriage_returns``."""
    from itertools import accumulate

    from bertstream.pipelines.common.files import _split_carriage_returns, clean_line, decode_block

    text = clean_line(decode_block(raw, counters), counters)
    lines = text.split("\n")
    raws = raw.split(b"\n")
    if raw.endswith(b"\n"):
        lines.pop()
        raws.pop()
    starts = list(accumulate((len(r) + 1 for r in raws[:-1]), initial=offset))
    if "\r" in text:
        starts, lines = _split_carriage_returns(starts, lines, raws, raw.endswith(b"\n"))
    counters[C.LINES] += len(lines)
    return list(zip(starts, lines))


def test_block_lines_as_before_on_random_blocks() -> None:
    from bertstream.pipelines.common.files import block_lines

    pieces = [
        b"a", b"word ", b"\n", b"\r", b"\r\n", b"\n\n", b"\x00", b"\x07", b"\x0b", b"\x0c", b"\x1f", b"\x7f", b"\t",
        "\u2028".encode(), "\u2029".encode(), "\x85".encode(), "\ufeff".encode(), "\ufffe".encode(), "é".encode(),
        "“中”".encode(), b"\xff", b"\xe2\x80", b"\xc2", b"\xef\xbb", b" ",
    ]  # fmt: skip
    rng = random.Random(11)
    for _ in range(4000):
        raw = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        offset = rng.randint(0, 1000)
        c_old, c_new = Counter(), Counter()
        expected = _reference_block_lines(offset, raw, c_old)
        assert list(block_lines(offset, raw, c_new)) == expected, raw
        assert +c_new == +c_old, raw
