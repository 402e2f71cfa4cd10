"""Per-source counters and [UNK] words recorded while tokenizing (what ``bertprep report`` shows)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from pipelines import counters as C
from pipelines import source_stats as SS
from pipelines.config import PretrainingConfig
from pipelines.pretraining import run_pretraining
from pipelines.tokenize import DocumentTokenizer, load_tokenizer
from tests.conftest import shared_path


def test_source_of_document_ids():
    assert SS.source_of("wiki/AA/wiki_00:1234") == "wiki"
    assert SS.source_of("books/a.txt") == "books"
    assert SS.source_of("a.txt") == "a.txt"
    assert SS.source_of("a.txt:17") == "a.txt"
    assert SS.source_of("odd:name") == "odd:name"  # only a numeric tail is an offset


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, demo_vocab):
    """The pydoc vocabulary (ASCII English) on a novel with typographic quotes and BERT's sample text."""
    pretrain = shared_path("pretrain")
    out = tmp_path_factory.mktemp("mixed")
    cfg = PretrainingConfig(input_format="sentences", dupe_factor=1, num_shards=2)
    inputs = [f"text:{pretrain / 'gutenberg' / '11-0.txt'}", str(pretrain / "sample_text.txt")]
    return run_pretraining(inputs=inputs, vocab=str(demo_vocab / "vocab.txt"), output_dir=str(out), cfg=cfg).manifest


def test_per_source_counters_add_up_to_the_totals(mixed):
    c = mixed.counters
    sources = SS.per_source(c)
    assert set(sources) == {"gutenberg", "sample_text.txt"}  # names below the common folder, first component
    assert sources["gutenberg"]["documents"] == 1  # one book
    assert sum(s["documents"] for s in sources.values()) == c[C.DOCUMENTS_USED]
    assert sum(s["tokens"] for s in sources.values()) == c[C.TOKENS]
    assert sum(s["unk_tokens"] for s in sources.values()) == c[SS.UNK_TOKENS] > 0


def test_unk_words_are_words_the_vocabulary_cannot_spell(mixed, demo_vocab):
    uw = mixed.statistics["unk_words"]
    assert uw["exact"] and uw["max_undercount"] == 0
    top = uw["top"]
    counts = [n for _, n in top]
    assert counts == sorted(counts, reverse=True) and top
    total = mixed.counters[SS.UNK_TOKENS]
    assert sum(counts) <= total and (len(top) == SS.TOP or sum(counts) == total)
    # Each listed word occurs in the (normalized) input, and tokenized alone it is exactly one [UNK].
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    tok = DocumentTokenizer(spec)
    text = tok.tokenizer.normalizer.normalize_str(shared_path("pretrain", "sample_text.txt").read_text("utf-8"))
    for word, _ in top:
        assert word in text and tok.tokenizer.encode(word, add_special_tokens=False).ids == [tok.unk_id], word


def test_unk_words_read_back_from_ids_match_offsets(demo_vocab):
    """The ids-only read-back gives the same words as the tokenizer's own character offsets."""
    # Chinese Wikipedia through an English vocabulary: many characters, and some Latin words, are [UNK].
    text = shared_path("pretrain", "chinese", "zhwiki", "wiki_00").read_text(encoding="utf-8")
    sentences = [s for s in text.splitlines() if s.strip() and not s.startswith("<")][:300]
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    tok = DocumentTokenizer(spec)
    batch = tok([("alice.txt", [" ".join(s.split()) for s in sentences])], Counter())
    expected: Counter = Counter()
    for s in sentences:
        s = " ".join(s.split())
        normalized = tok.tokenizer.normalizer.normalize_str(s)
        enc = tok.tokenizer.encode(normalized, add_special_tokens=False)  # with offsets: slower, exact
        expected.update(normalized[a:b] for i, (a, b) in enumerate(enc.offsets) if enc.ids[i] == tok.unk_id)
    assert batch.unk_words == expected and sum(expected.values()) > 1000


def test_bounded_summary_keeps_the_frequent_words_within_its_error_bound(demo_corpus):
    """Misra-Gries on real word counts: at most ``capacity`` words, each low by at most the stated bound, and
    every word more frequent than that bound is kept. Merging partial summaries keeps the guarantee."""
    words = re.findall(r"\w+", " ".join(p.read_text(encoding="utf-8") for p in sorted(demo_corpus.glob("*.txt"))))
    true = Counter(words)
    fn = SS._UnkWordsFn(capacity=200)
    parts = [Counter(words[i : i + 5000]) for i in range(0, len(words), 5000)]
    accs = [fn.add_input(fn.create_accumulator(), p) for p in parts[:3]]
    acc = fn.create_accumulator()
    for p in parts[3:]:
        acc = fn.add_input(acc, p)
    counts, under = fn.merge_accumulators([*accs, acc])
    assert len(counts) <= 200 and 0 < under <= len(words) // 201
    for w, n in counts.items():
        assert true[w] - under <= n <= true[w]
    assert {w for w, n in true.items() if n > under} <= set(counts)
    out = fn.extract_output((counts, under))
    assert not out["exact"] and out["max_undercount"] == under and len(out["top"]) == SS.TOP
    assert out["top"][0][0] == true.most_common(1)[0][0]
