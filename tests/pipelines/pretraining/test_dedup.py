from __future__ import annotations

import hashlib
import random
import shutil
from collections import Counter
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.inputs.read import Document, DocumentBatch, read_documents
from bertstream.pipelines.pretraining import dedup as D
from bertstream.pipelines.pretraining import minhash as M
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
from tests.conftest import shared_path


def wiki_docs(n: int = 12) -> list[Document]:
    docs = list(read_documents(str(shared_path("pretrain", "wikipedia", "wiki_00")), "wikiextractor", Counter()))
    return [d for d in docs if len(M.words(D.document_text(d))) > 300][:n]


def edited(text: str, fraction: float, seed: int, span: int = 1) -> str:
    """``text`` with about ``fraction`` of its words replaced, in runs of ``span`` words."""
    ws = text.split()
    rng = random.Random(seed)
    for start in rng.sample(range(len(ws) - span), max(1, round(len(ws) * fraction / span))):
        for i in range(start, start + span):
            ws[i] = f"edit{rng.randrange(10**6)}"
    return " ".join(ws)


def jaccard(a: str, b: str, ngram: int = 5) -> float:
    sa, sb = set(M.text_shingles(a, ngram).tolist()), set(M.text_shingles(b, ngram).tolist())
    return len(sa & sb) / len(sa | sb)


# --- pure functions -----------------------------------------------------------------------------------


def test_normalise_folds_case_whitespace_and_punctuation():
    assert M.normalise("Hello,  World!\n(Again) -- it's_here.") == "hello world again it s here"
    assert M.normalise("STRASSE  Straße") == "strasse strasse"  # casefold, not lower
    assert D.exact_hash("The cat sat.\n\nOn the mat!") == D.exact_hash("the CAT sat on   the mat")
    assert D.exact_hash("the cat sat") != D.exact_hash("the cat sat down")


def test_id_order_compares_offsets_as_numbers():
    ids = ["wiki_00:1000", "wiki_00:999", "a.txt", "wiki_00:0", "wiki_01:5"]
    assert sorted(ids, key=D.id_order) == ["a.txt", "wiki_00:0", "wiki_00:999", "wiki_00:1000", "wiki_01:5"]


def test_signature_is_deterministic_and_estimates_jaccard():
    doc = wiki_docs(1)[0]
    text = D.document_text(doc)
    a, b = M.permutations(7)
    sig = M.signature(M.text_shingles(text, 5), a, b)
    assert sig.dtype == np.uint64 and sig.shape == (M.NUM_PERM,)
    # The seeds derive from the seed alone; the block size is only how the work is cut.
    again = M.signature(M.text_shingles(text, 5), *M.permutations(7), block=7)
    assert np.array_equal(sig, again)
    assert not np.array_equal(sig, M.signature(M.text_shingles(text, 5), *M.permutations(8)))
    near = edited(text, 0.03, seed=1, span=10)
    true = jaccard(text, near)
    sk = M.sketches(np.stack([sig, M.signature(M.text_shingles(near, 5), a, b)]))
    est = float(M.estimated_jaccard(sk[0], sk[1:])[0])
    assert 0.85 < true < 0.97 and abs(est - true) < 0.12  # ~3 standard deviations at 128 permutations


def test_word_table_is_the_regex_on_every_code_point():
    from bertstream.pipelines.pretraining.kernels.minhash import word_table

    table = word_table()
    every = " ".join(map(chr, range(0x110000)))  # a space between code points: each stands alone
    matched = {ord(w) for w in M._WORD.findall(every)}
    assert set(np.flatnonzero(table).tolist()) == matched


@pytest.mark.parametrize("minhash", [True, False])
def test_kernel_matches_the_reference(minhash):
    from bertstream.pipelines.pretraining.minhash import _compiled_hashes

    texts = [D.document_text(d) for d in wiki_docs(8)]
    texts += ["", "  ...  ", "one", "Straße ÉCOLE «quoted» naïve_under", "a b c d", "数学 是 研究 数量"]
    a, b = M.permutations(3)
    for ngram in (1, 5):
        want = M.reference_document_hashes(texts, ngram, a, b, minhash)
        got = _compiled_hashes(texts, ngram, a, b, minhash)
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and np.array_equal(w, g)
    assert want[1][0] == D.exact_hash(texts[0].upper())


def test_band_math_for_threshold_0_8():
    bands, rows = M.lsh_params(0.8)
    assert (bands, rows) == (14, 9) and bands * rows <= M.NUM_PERM

    def p(s):
        return 1 - (1 - s**rows) ** bands

    # A candidate at the threshold more often than not; near certainly at 0.9; rarely below 0.5.
    assert p(0.8) > 0.85 and p(0.9) > 0.998 and p(0.5) < 0.03 and p(0.3) < 1e-3
    assert M.lsh_params(0.5)[1] < rows < M.lsh_params(0.95)[1]  # a higher threshold: more rows per band


def test_encoded_parts_round_trip():
    docs = wiki_docs(5)
    parts = D.sign_batch(docs, "minhash", 5, 0.8, 3, partitions=4)
    bands, rows = M.lsh_params(0.8)
    decoded = [x for p in sorted(parts) for x in D.decode_parts(parts[p] + parts[p])]
    assert sum(len(part.keys) for part in decoded) == 2 * len(docs) * (bands + 1)  # the exact hash and bands
    for part in decoded:
        assert set(part.ids) <= {d.doc_id for d in docs} and part.sketches.shape == (len(part.ids), M.NUM_PERM)
        assert part.docs.max() < len(part.ids) and part.bands.min() >= D.EXACT_BAND
    stub = [Document("s:1", ["April 13 is the day of the year."]), Document("s:2", ["Big", "word " * 40])]
    (part,) = D.decode_parts(b"".join(D.sign_batch(stub, "minhash", 5, 0.8, 3, partitions=1).values()))
    assert part.small[1] is None and np.array_equal(part.small[0], np.unique(M.text_shingles(stub[0].paragraphs[0], 5)))


def test_resolution_keeps_the_smallest_id_and_is_order_free():
    docs = wiki_docs(6)
    base, other = docs[0], docs[1]
    exact = Document("z:10", [D.document_text(base).upper()])  # same normalised text
    near = Document("a:5", [edited(D.document_text(base), 0.02, seed=2, span=8)])
    near2 = Document("z:2", [edited(D.document_text(other), 0.02, seed=3, span=8)])
    everything = [*docs, exact, near, near2]

    def removals(batch: list[Document], partitions: int) -> dict:
        parts = D.sign_batch(batch, "minhash", 5, 0.8, 1, partitions)
        return dict(D.resolve_partition([x for p in parts.values() for x in D.decode_parts(p)], 0.8))

    got = removals(everything, 1)
    first = min([base.doc_id, near.doc_id], key=D.id_order)  # "a:5" sorts before wiki_00:...
    assert got == {
        exact.doc_id: (base.doc_id, D.EXACT),
        max([base.doc_id, near.doc_id], key=D.id_order): (first, D.NEAR),
        near2.doc_id: (other.doc_id, D.NEAR),
    }
    assert removals(everything[::-1], 1) == got  # input order does not matter
    merged: dict = {}
    for parts in [D.sign_batch(everything, "minhash", 5, 0.8, 1, 16)]:
        for p in parts.values():
            for doc, r in D.resolve_partition(D.decode_parts(p), 0.8):
                merged.setdefault(doc, []).append(r)
    assert {d: D.merge_removals(rs) for d, rs in merged.items()} == got  # nor the partition count


def test_small_documents_compare_exactly():
    """Wikipedia's one-sentence date stubs: true 5-gram Jaccard 7/9 = 0.78 to one another, under 0.8."""
    stubs = [
        Document(f"w:{k}", [f"{day} is the day of the year in the Gregorian calendar."])
        for k, day in enumerate(["April 13", "August 13", "April 6", "March 13", "June 13"])
    ]
    copy = Document("w:9", ["APRIL 13 is the day of the year in the Gregorian calendar!", "Sources"])
    parts = D.sign_batch([*stubs, copy], "minhash", 5, 0.8, 1, 1)
    got = D.resolve_partition([x for p in parts.values() for x in D.decode_parts(p)], 0.8)
    # A near copy (one word more: J = 7/8) goes; the stubs, 0.78 apart, stay whatever the hashes say.
    assert got == [("w:9", ("w:0", D.NEAR))]
    assert M.exact_jaccard(*(np.unique(M.text_shingles(d.paragraphs[0], 5)) for d in stubs[:2])) == 7 / 9


def test_exact_mode_ignores_near_duplicates():
    docs = wiki_docs(3)
    near = Document("z:1", [edited(D.document_text(docs[0]), 0.02, seed=2, span=8)])
    copy = Document("z:2", [D.document_text(docs[1]) + " !!"])
    parts = D.sign_batch([*docs, near, copy], "exact", 5, 0.8, 1, 1)
    got = D.resolve_partition(D.decode_parts(parts[0]), 0.8)
    assert got == [("z:2", (docs[1].doc_id, D.EXACT))]


def test_filter_counts_each_drop_and_the_sample_is_the_smallest_ids():
    docs = [Document(f"f:{i}", ["x"]) for i in range(5)]
    removed = {"f:1": ("f:0", D.EXACT), "f:3": ("f:2", D.NEAR)}
    out = D.filter_batch(DocumentBatch(docs, Counter({C.DOCUMENTS_READ: 5})), removed)
    assert [d.doc_id for d in out.documents] == ["f:0", "f:2", "f:4"]
    assert out.counters == Counter({C.DOCUMENTS_READ: 5, "documents_dropped.exact_duplicate": 1,
                                    "documents_dropped.near_duplicate": 1})  # fmt: skip
    sample = D.removal_sample(list(removed.items())[::-1], n=1)
    assert sample == [{"id": "f:1", "duplicate_of": "f:0", "kind": "exact"}]


def test_config_validates_dedup():
    with pytest.raises(UsageError, match="dedup: must be one of"):
        PretrainingConfig(dedup="fuzzy")
    with pytest.raises(UsageError, match="dedup_threshold"):
        PretrainingConfig(dedup_threshold=0.0)
    assert "dedup" not in PretrainingConfig().shard_parameters()  # default shards keep their bytes
    assert PretrainingConfig(dedup="minhash").shard_parameters()["dedup_threshold"] == 0.8


# --- the composite ------------------------------------------------------------------------------------


def test_dedup_composite(tmp_path):
    docs = wiki_docs(6)
    copy = Document("zz:1", [D.document_text(docs[2]).lower()])
    near = Document("zz:2", [edited(D.document_text(docs[4]), 0.02, seed=5, span=8)])
    batches = [DocumentBatch(docs[:3], Counter({C.DOCUMENTS_READ: 3})), DocumentBatch([*docs[3:], copy, near])]
    with TestPipeline() as p:
        kept, stats = (
            p
            | beam.Create(batches)
            | D.Dedup(D.DedupSpec(mode="minhash", seed=1, work_dir=str(tmp_path), partitions=3))
        )
        ids = kept | "Ids" >> beam.FlatMap(lambda b: [d.doc_id for d in b.documents])
        drops = kept | "Drops" >> beam.Map(lambda b: C.dropped(b.counters)) | beam.CombineGlobally(C.merge)
        sample = stats | beam.Map(lambda s: s["duplicates"]["removed_sample"])
        assert_that(ids, equal_to([d.doc_id for d in docs]), label="KeptIds")
        assert_that(drops, equal_to([{"exact_duplicate": 1, "near_duplicate": 1}]), label="Counted")
        expected = [
            {"id": "zz:1", "duplicate_of": docs[2].doc_id, "kind": "exact"},
            {"id": "zz:2", "duplicate_of": docs[4].doc_id, "kind": "near"},
        ]
        assert_that(sample, equal_to([expected]), label="Sample")


# --- the pipeline end to end ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dup_corpus(tmp_path_factory, demo_corpus) -> tuple[Path, dict[str, tuple[str, str]]]:
    """The pydoc corpus plus copies named to sort *before* their originals (so the original is removed):
    two exact copies (case and spacing changed) and two near copies (2% of words changed in runs).
    Returns the folder and each expected removal: id -> (the id it duplicates, kind)."""
    d = tmp_path_factory.mktemp("dup_corpus")
    files = sorted(demo_corpus.glob("*.txt"))
    for f in files:
        shutil.copy(f, d / f.name)
    big = sorted(files, key=lambda f: -f.stat().st_size)[:4]
    expect = {"if.txt": ("else.txt", "exact")}  # pydoc's own: the two topics hold the same text
    for k, f in enumerate(big):
        text = f.read_text(encoding="utf-8")
        if k < 2:
            copy, kind = "  ".join(text.upper().split()), "exact"
        else:
            copy, kind = edited(text, 0.02, seed=k, span=10), "near"
        (d / f"0copy{k}-{f.name}").write_text(copy, encoding="utf-8")
        expect[f.name] = (f"0copy{k}-{f.name}", kind)  # text ids are file names: "0copy..." sorts first
    return d, expect


def run_dedup(corpus: Path, vocab: Path, out: Path, dedup: str, workers: int = 1):
    args = [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"] if workers > 1 else []
    cfg = PretrainingConfig(input_format="text", dupe_factor=1, num_shards=2, dedup=dedup)
    return run_pretraining(
        PretrainingJob(
            inputs=tuple([str(corpus / "*.txt")]),
            vocab=str(vocab / "vocab.txt"),
            output=str(out),
            config=cfg,
            beam_args=tuple(args or ()),
        )
    )


def digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("pretrain-*"))}


@pytest.mark.slow
def test_pipeline_minhash_removes_injected_copies_same_for_two_workers(tmp_path, dup_corpus, demo_vocab):
    corpus, expect = dup_corpus
    one = run_dedup(corpus, demo_vocab, tmp_path / "one", "minhash")
    c = one.manifest.counters
    assert c["documents_dropped.exact_duplicate"] == 3 and c["documents_dropped.near_duplicate"] == 2
    assert c[C.DOCUMENTS_READ] == c[C.DOCUMENTS_USED] + sum(C.dropped(c).values()) == 79 + 4
    dup = one.manifest.statistics["duplicates"]
    assert (dup["mode"], dup["bands"], dup["rows"]) == ("minhash", 14, 9)
    # The kept document is the smallest id: the copy, named to sort first, and "else" before "if".
    assert {s["id"]: (s["duplicate_of"], s["kind"]) for s in dup["removed_sample"]} == expect
    assert one.manifest.parameters["dedup"] == "minhash"
    two = run_dedup(corpus, demo_vocab, tmp_path / "two", "minhash", workers=2)
    assert digests(tmp_path / "one") == digests(tmp_path / "two")
    assert two.manifest.counters == c and two.manifest.statistics == one.manifest.statistics


@pytest.mark.slow
def test_pipeline_exact_removes_only_exact_copies(tmp_path, dup_corpus, demo_vocab):
    corpus, expect = dup_corpus
    m = run_dedup(corpus, demo_vocab, tmp_path / "exact", "exact").manifest
    assert C.dropped(m.counters) == {"exact_duplicate": 3}
    removed = {s["id"]: (s["duplicate_of"], s["kind"]) for s in m.statistics["duplicates"]["removed_sample"]}
    assert removed == {k: v for k, v in expect.items() if v[1] == "exact"}
    none = run_dedup(corpus, demo_vocab, tmp_path / "none", "none").manifest
    assert "duplicates" not in none.statistics and C.dropped(none.counters) == {}
    assert none.counters[C.DOCUMENTS_USED] == m.counters[C.DOCUMENTS_USED] + 3


@pytest.mark.parametrize("flag,value", [("--dedup", "fuzzy"), ("--dedup-threshold", "1.5"), ("--dedup-ngram", "0")])
def test_bad_dedup_options_are_usage_errors_naming_the_flag(tmp_path, demo_corpus, demo_vocab, flag, value):
    from click.testing import CliRunner

    from bertstream.pipelines.cli import main
    from tests.argv import with_flags

    args = ["pretraining", "--input", str(demo_corpus / "assert.txt"), "--vocab", str(demo_vocab / "vocab.txt")]
    base = [*args, "--output", str(tmp_path / "o"), "--dedup", "minhash"]
    r = CliRunner().invoke(main, with_flags(base, [flag, value]))
    assert r.exit_code == 2 and f"'{flag}'" in r.output, r.output
    assert not (tmp_path / "o" / "manifest.json").exists()
