"""Per-source counters and [UNK] words recorded while tokenizing (what ``bertprep report`` shows)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import source_stats as SS
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer.load import load_tokenizer
from tests.conftest import shared_path


def test_source_of_document_ids():
    assert SS.source_of("wiki/AA/wiki_00:1234") == "wiki"
    assert SS.source_of("books/a.txt") == "books"
    assert SS.source_of("a.txt") == "a.txt"
    assert SS.source_of("a.txt:17") == "a.txt"
    assert SS.source_of("odd:name") == "odd:name"  # only a numeric tail is an offset


def test_each_input_is_one_source_named_by_its_own_folder():
    # Three --inputs below one folder were one source, "set1", named after the folder above two of them.
    listed = [
        ("set1/a/x.txt", "/d/set1/a/*.txt"),
        ("set1/a/y.txt", "/d/set1/a/*.txt"),
        ("set1/b/z.txt", "text:/d/set1/b/z.txt"),
        ("set2/p/q.txt", "/d/set2/"),
        ("set2/r.txt", "/d/set2/"),
    ]
    table = SS.source_table(listed)
    assert {source for _, source in table} == {"set1/a", "set1/b/z.txt", "set2"}
    assert [SS.source_of(f"{name}:10", table) for name, _ in listed] == [
        "set1/a",
        "set1/a",
        "set1/b/z.txt",
        "set2",
        "set2",
    ]
    # An input over the whole common folder is named as given; wildcards are no name.
    both = SS.source_table([("a.txt", "/d/*.txt"), ("b.txt", "/d/*.txt"), ("sub/c.md", "text:/d/sub/c.md")])
    assert both == (("sub/c.md", "sub/c.md"), ("", "d"))
    assert [SS.source_of(n, both) for n in ("a.txt", "sub/c.md")] == ["d", "sub/c.md"]
    # One input (a Wikipedia extract's AA/, AB/, ...) is broken down by what it holds, as before
    wiki = SS.source_table([("AA/wiki_00", "wikiextractor:corpus/wiki/"), ("AB/wiki_01", "wikiextractor:corpus/wiki/")])
    assert wiki == () and SS.source_of("AB/wiki_01:7", wiki) == "AB"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, demo_vocab):
    """The pydoc vocabulary (ASCII English) on a novel with typographic quotes and BERT's sample text."""
    pretrain = shared_path("pretrain")
    out = tmp_path_factory.mktemp("mixed")
    cfg = PretrainingConfig(input_format="sentences", dupe_factor=1, num_shards=2)
    inputs = [f"text:{pretrain / 'gutenberg' / '11-0.txt'}", str(pretrain / "sample_text.txt")]
    return run_pretraining(
        PretrainingJob(inputs=tuple(inputs), vocab=str(demo_vocab / "vocab.txt"), output=str(out), config=cfg)
    ).manifest


def test_per_source_counters_add_up_to_the_totals(mixed):
    c = mixed.counters
    sources = SS.per_source(c)
    assert set(sources) == {"gutenberg/11-0.txt", "sample_text.txt"}  # one per --input, below the common folder
    assert sources["gutenberg/11-0.txt"]["documents"] == 1  # one book
    assert sum(s["documents"] for s in sources.values()) == c[C.DOCUMENTS_USED]
    assert sum(s["tokens"] for s in sources.values()) == c[C.TOKENS]
    assert sum(s["unk_tokens"] for s in sources.values()) == c[SS.UNK_TOKENS] > 0


def test_unk_words_are_words_the_vocabulary_cannot_spell(mixed, demo_vocab):
    uw = mixed.statistics["unk_words"]
    assert uw["exact"] and uw["sampled_fraction"] == 1.0
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


def test_bounded_sample_is_exact_and_the_same_however_the_batches_merge(demo_corpus):
    """On real word counts with room for 200 words: at most 200 kept, each with its exact count, the same set
    whether the batches arrive one by one or as partial merges in another order, at the lowest level that fits."""
    words = re.findall(r"\w+", " ".join(p.read_text(encoding="utf-8") for p in sorted(demo_corpus.glob("*.txt"))))
    true = Counter(words)
    fn = SS.UnkWordsFn(capacity=200)
    parts = [Counter(words[i : i + 5000]) for i in range(0, len(words), 5000)]
    one_by_one = fn.create_accumulator()
    for p in parts:
        one_by_one = fn.add_input(one_by_one, p)
    partial = [fn.add_input(fn.create_accumulator(), p) for p in parts[::-1][:3]]
    rest = fn.create_accumulator()
    for p in parts[::-1][3:]:
        rest = fn.add_input(rest, p)
    merged = fn.merge_accumulators([rest, *partial])
    counts, level = one_by_one
    assert merged == one_by_one and 0 < len(counts) <= 200 and level > 0
    assert all(true[w] == n for w, n in counts.items())
    assert len(SS._kept(true, level - 1)) > 200 and SS._kept(true, level) == counts  # the lowest level that fits
    out = fn.extract_output(one_by_one)
    assert not out["exact"] and out["sampled_fraction"] == 2.0**-level and len(out["top"]) == SS.TOP
    assert out["top"][0] == list(counts.most_common(1)[0])


def test_the_manifest_lists_a_bounded_number_of_sources():
    """Every allocation is bounded (issue 33): 20,000 one-line files at the top held 40,000 counters in the
    manifest; past SS.MAX_SOURCES the sources with fewest tokens are summed as one, the totals unchanged."""
    counters: Counter = Counter({"documents_read": 20_000})
    for i in range(20_000):
        SS.count_document(counters, f"f{i:05d}.txt:0", tokens=1 + i % 7, unk=int(i % 3 == 0))
    bounded = SS.bounded_sources(counters)
    table = SS.per_source(bounded)
    assert len(table) == SS.MAX_SOURCES and SS.OTHER_SOURCES in table and bounded["documents_read"] == 20_000
    before = SS.per_source(counters)
    for field in ("documents", "tokens", "unk_tokens"):
        assert sum(r[field] for r in table.values()) == sum(r[field] for r in before.values())
    assert len(bounded) < 4 * SS.MAX_SOURCES
    few = Counter()
    SS.count_document(few, "wiki/AA/wiki_00:1", tokens=5, unk=0)
    assert SS.bounded_sources(few) == dict(few)  # under the bound: as it was
