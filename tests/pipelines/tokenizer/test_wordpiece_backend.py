"""The fast WordPiece backend (nanotoken) against Hugging Face ``tokenizers``, id for id, on real text and on
seeded hostile strings; the fallback to ``tokenizers`` (same ids, one line); threads and forked processes.

No bert-base-uncased vocabulary is on disk (only bert-base-chinese's, in the shared data), so the English parity
runs on 30,522-token vocabularies trained here by the project's own vocab trainer (``bertprep vocab``,
:func:`bertstream.pipelines.vocab.train_vocab`) on all the shared English text, one uncased (loaded from its vocab.txt) and one
cased (loaded from its tokenizer.json): the ids are then those of BertTokenizerFast with that vocabulary.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.inputs.read import read_documents
from bertstream.pipelines.inputs.resolve import resolve_inputs
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
from bertstream.pipelines.pretraining.segmenter import split_sentences
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer import wordpiece_backend as WB
from bertstream.pipelines.tokenizer.load import TokenizerSpec, load_tokenizer
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.vocab import VocabError
from tests.conftest import SHARED, shared_path

nanotoken = pytest.importorskip("nanotoken", reason="the fast backend is not installed")


@pytest.fixture(autouse=True)
def _fresh_log(monkeypatch):
    """Each test sees its own "once per process" log lines, and the default mode."""
    monkeypatch.setattr(WB, "_said", set())
    monkeypatch.delenv(WB.ENV, raising=False)


def hf_ids(spec_json: str, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The reference: `tokenizers` itself, as the pipeline called it before the fast backend."""
    tok = Tokenizer.from_str(spec_json)
    return WB.ragged([e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)])


def assert_same(spec_json: str, texts: list[str], what: str) -> int:
    """Both backends give every text the same ids; returns the tokens compared."""
    fast = WB.WordPieceEncoder(spec_json, WB.FAST)
    assert fast.backend.name == WB.FAST
    ids, offsets = fast.encode(texts)
    ref_ids, ref_offsets = hf_ids(spec_json, texts)
    if not (np.array_equal(ids, ref_ids) and np.array_equal(offsets, ref_offsets)):
        for i in range(len(texts)):
            a, b = ids[offsets[i] : offsets[i + 1]], ref_ids[ref_offsets[i] : ref_offsets[i + 1]]
            assert np.array_equal(a, b), f"{what}: text {i} {texts[i][:200]!r}: {a[:30]} != {b[:30]}"
    return len(ids)


# ------------------------------------------------------------------------------------------- real text

ENGLISH = [("wikipedia", "wiki_*", "wikiextractor"), ("gutenberg", "*.txt", "text")]
CHINESE = [
    ("zhwiki/wiki_00", "wikiextractor"),
    ("wiki_zh_2019/wiki_00", "jsonl"),
    ("CLUECorpusSmall_bert_sampled.txt", "sentences"),
    ("CLUECorpusSmall_sampled.txt", "lines"),
]


def english_inputs() -> list[str]:
    return [f"{fmt}:{shared_path('pretrain', folder)}/{glob}" for folder, glob, fmt in ENGLISH]


def paragraphs(inputs: list[str], fmt: str) -> list[str]:
    """Every paragraph the pipeline reads from ``inputs`` (benchmarks/pipeline_throughput.py's ``paragraphs_of``)."""
    return [
        p
        for f in resolve_inputs(inputs, fmt)
        for d in read_documents(f.path, f.format, Counter())
        for p in d.paragraphs
    ]


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def english_vocab(request, tmp_path_factory) -> TokenizerSpec:
    """A 30,522-token vocabulary trained by ``bertprep vocab``'s trainer on all the shared English text (~8 s)."""
    from bertstream.pipelines.vocab import VocabConfig, train_vocab

    out = tmp_path_factory.mktemp("english_vocab")
    # The cased one learns from the books and a quarter of Wikipedia: half the training time, still a full-size
    # vocabulary, and the text it is compared on is all of it either way.
    inputs = english_inputs() if request.param else [*english_inputs()[1:], english_inputs()[0].replace("*", "0[0-3]")]
    train_vocab(inputs, out, VocabConfig(input_format="text", lowercase=request.param))
    # uncased through vocab.txt, cased through the tokenizer.json the trainer writes beside it
    return (
        load_tokenizer(str(out / "vocab.txt"), True) if request.param else load_tokenizer(str(out / "tokenizer.json"))
    )


@pytest.fixture(scope="module")
def english_paragraphs() -> list[str]:
    return paragraphs(english_inputs(), "text")


@pytest.mark.shared_data
def test_ids_identical_on_all_shared_english_paragraphs(english_vocab, english_paragraphs):
    """72,637 paragraphs (22 MB: 16 Wikipedia files, 6 books), ~4.7 M tokens, in ~10 s (the reference's time)."""
    assert len(english_vocab.vocab) == 30522
    assert WB.fast_unsupported(english_vocab.json) is None
    texts = english_paragraphs
    assert len(texts) > 70_000
    assert assert_same(english_vocab.json, texts, "English") > 4_500_000


@pytest.mark.shared_data
def test_ids_identical_on_all_shared_chinese_text():
    """The four Chinese files (1.4 M distinct characters, CLUECorpusSmall in two layouts) with bert-base-chinese."""
    spec = load_tokenizer(str(shared_path("vocab", "bert-base-chinese-vocab.txt")))
    assert WB.fast_unsupported(spec.json) is None
    tokens = 0
    for name, fmt in CHINESE:
        texts = paragraphs([f"{fmt}:{shared_path('pretrain', 'chinese', *name.split('/'))}"], fmt)
        tokens += assert_same(spec.json, texts, name)
    assert tokens > 1_900_000


# ----------------------------------------------------------------------------------------- hostile text

SPECIAL_LIKE = ["[SEP]", "[CLS]", "[MASK]", "[UNK]", "[PAD]", "[sep]", "[SEP", "SEP]", "[[SEP]]", "[ SEP ]"]
SPECIAL_LIKE += ["[SEP][SEP]", "x[SEP]y", "##", "##ing", "[unused1]"]
# Code point ranges: C0/C1 controls, combining accents, Latin with diacritics, Greek, Cyrillic, Hebrew/Arabic,
# Thai, general punctuation and zero-width characters, CJK punctuation, kana, CJK ext. A and unified ideographs,
# Hangul, compatibility ideographs, variation selectors, BOM and half/full-width forms, specials, emoji, CJK
# ext. B, tags, the last plane's end.
RANGES = [(0x0, 0x20), (0x7F, 0xA0), (0x300, 0x370), (0xC0, 0x250), (0x370, 0x400), (0x400, 0x500), (0x590, 0x700)]
RANGES += [(0xE00, 0xE80), (0x2000, 0x2070), (0x3000, 0x3040), (0x3040, 0x3100), (0x3400, 0x3500), (0x4E00, 0xA000)]
RANGES += [(0xAC00, 0xAD00), (0xF900, 0xFB00), (0xFE00, 0xFE10), (0xFEFF, 0xFF00), (0xFF00, 0xFFF0), (0xFFF0, 0x10000)]
RANGES += [(0x1F300, 0x1F700), (0x1F900, 0x1FA00), (0x20000, 0x20100), (0xE0000, 0xE0080), (0x10FFF0, 0x110000)]
ODD = "\t\n\r\x0b\x0c\x00 \u00a0\u2028\u2029\u0085\u200b\u200c\u200d\u2060\ufeff\ufffd\u3000ßİıﬁﬀΣςẞǅ\u0307e\u0301"
ODD += "👍🏽👨‍👩‍👧\ufe0f"
SURROGATE = re.compile("[\ud800-\udfff]")


def hostile_strings(seed: int, words: list[str], n: int) -> list[str]:
    """``n`` seeded strings mixing vocabulary words (any case) with everything BERT's normalizer and pre-tokenizer
    treat specially: controls and NUL, combining accents, words over 100 characters, CJK beside Latin, special-token
    look-alikes, emoji and ZWJ sequences, odd whitespace, random code points; lone surrogates replaced by U+FFFD
    (as the readers decode invalid bytes: a str holding one cannot reach the tokenizer)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(int(rng.integers(1, 40))):
            k = rng.random()
            if k < 0.35:
                w = words[int(rng.integers(len(words)))]
                case = rng.random()
                parts.append(w.upper() if case < 0.1 else w.capitalize() if case < 0.2 else w)
            elif k < 0.45:
                parts.append(SPECIAL_LIKE[int(rng.integers(len(SPECIAL_LIKE)))])
            elif k < 0.5:
                parts.append("".join(chr(c) for c in rng.integers(97, 123, int(rng.integers(95, 130)))))
            elif k < 0.7:
                lo, hi = RANGES[int(rng.integers(len(RANGES)))]
                parts.append("".join(chr(c) for c in rng.integers(lo, hi, int(rng.integers(1, 6)))))
            elif k < 0.8:
                parts.append("".join(ODD[i] for i in rng.integers(0, len(ODD), int(rng.integers(1, 4)))))
            elif k < 0.85:
                parts.append(chr(int(rng.integers(0xD800, 0xE000))))
            else:
                parts.append("".join(chr(c) for c in rng.integers(0, 0x110000, int(rng.integers(1, 4)))))
            gap = rng.random()
            parts.append(" " if gap < 0.6 else "" if gap < 0.85 else "\n")
        out.append(SURROGATE.sub("\ufffd", "".join(parts)))
    return out


def with_normalizer(spec_json: str, lowercase: bool, strip_accents: bool | None) -> str:
    data = json.loads(spec_json)
    data["normalizer"].update(lowercase=lowercase, strip_accents=strip_accents)
    return json.dumps(data)


def vocab_words(spec: TokenizerSpec) -> list[str]:
    return [t.removeprefix("##") for t in spec.vocab.tokens]


@pytest.mark.parametrize("seed", [0, 1])
def test_ids_identical_on_seeded_hostile_strings(demo_vocab, seed):
    """3,000 strings a seed with the demo vocabulary, then 600 of them under every casing and accent option
    BertNormalizer has (the options the fast backend accepts)."""
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    texts = hostile_strings(seed, vocab_words(spec), 3000)
    assert any(len(w) > 100 for t in texts for w in t.split()) and any("\x00" in t for t in texts)
    assert any(re.search("[\u4e00-\u9fff][a-z]", t) for t in texts) and any("[SEP]" in t for t in texts)
    assert assert_same(spec.json, texts, f"seed {seed}") > 80_000
    for lowercase in (True, False):
        for strip in (None, True, False):
            variant = with_normalizer(spec.json, lowercase, strip)
            assert WB.fast_unsupported(variant) is None
            assert_same(variant, texts[:600], f"seed {seed}, lowercase={lowercase}, strip_accents={strip}")


@pytest.mark.shared_data
def test_ids_identical_on_hostile_strings_with_the_chinese_vocab():
    spec = load_tokenizer(str(shared_path("vocab", "bert-base-chinese-vocab.txt")))
    assert assert_same(spec.json, hostile_strings(7, vocab_words(spec), 3000), "bert-base-chinese") > 80_000


# ----------------------------------------------------------------------------------------------- fallback


def unsupported_variants() -> list[tuple[str, object]]:
    """(what, change to a tokenizer.json): each a tokenizer the fast backend must not encode."""

    def added(flag: str):
        def change(d: dict) -> None:
            d["added_tokens"][3][flag] = not d["added_tokens"][3][flag]

        return change

    return [
        ("Whitespace pre-tokenizer", lambda d: d.update(pre_tokenizer={"type": "Whitespace"})),
        (
            "Sequence normalizer",
            lambda d: d.update(
                normalizer={"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]}
            ),
        ),
        ("no CJK spacing", lambda d: d["normalizer"].update(handle_chinese_chars=False)),
        ("no text cleaning", lambda d: d["normalizer"].update(clean_text=False)),
        ("normalized [SEP]", added("normalized")),
        ("lstrip [SEP]", added("lstrip")),
        ("single-word [SEP]", added("single_word")),
        ("words cut at 20 characters", lambda d: d["model"].update(max_input_chars_per_word=20)),
        (
            "RoBERTa post-processor",
            lambda d: d.update(
                post_processor={
                    "type": "RobertaProcessing",
                    "sep": ["[SEP]", 3],
                    "cls": ["[CLS]", 2],
                    "trim_offsets": True,
                    "add_prefix_space": False,
                }
            ),
        ),
    ]


@pytest.mark.parametrize("what,change", unsupported_variants(), ids=[w for w, _ in unsupported_variants()])
def test_an_unsupported_tokenizer_json_falls_back_to_tokenizers_with_one_line(
    demo_vocab, demo_corpus, tmp_path, capsys, what, change
):
    data = json.loads((demo_vocab / "tokenizer.json").read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    spec = load_tokenizer(str(path))
    assert WB.fast_unsupported(spec.json) is not None
    docs = demo_docs(demo_corpus)[:40]
    batch = DocumentTokenizer(spec)(docs, Counter())
    again = DocumentTokenizer(spec)  # a second worker in this process: no second line
    assert again.backend.name == WB.HF
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "tokenizer:" in ln]
    assert len(lines) == 1 and "same ids" in lines[0], lines
    ref = DocumentTokenizer(spec, backend=WB.HF)(docs, Counter())
    assert np.array_equal(batch.ids, ref.ids) and np.array_equal(batch.sentence_lengths, ref.sentence_lengths)
    with pytest.raises(VocabError, match="cannot encode it exactly"):
        WB.choose_backend(spec.json, mode="fast")


def test_a_pipeline_run_on_an_unsupported_tokenizer_says_so_once_and_records_tokenizers(
    demo_vocab, demo_corpus, tmp_path, capsys
):
    data = json.loads((demo_vocab / "tokenizer.json").read_text(encoding="utf-8"))
    data["pre_tokenizer"] = {"type": "Whitespace"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    cfg = PretrainingConfig(input_format="text", dupe_factor=1, num_shards=1)
    files = [str(f) for f in sorted(demo_corpus.glob("a*.txt"))]
    run_pretraining(PretrainingJob(inputs=tuple(files), vocab=str(path), output=str(tmp_path / "out"), config=cfg))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "tokenizer:" in ln]
    assert len(lines) == 1 and "'Whitespace' is not BertPreTokenizer" in lines[0], lines
    run = json.loads((tmp_path / "out" / MANIFEST_NAME).read_text())["run"]
    assert run["tokenizer"] == WB.backend(WB.HF).entry() and run["tokenizer"]["version"]


def test_without_nanotoken_tokenizers_encodes_with_one_line(demo_vocab, demo_corpus, monkeypatch, capsys):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    docs = demo_docs(demo_corpus)[:40]
    fast = DocumentTokenizer(spec)(docs, Counter())
    real_version = WB.metadata.version

    def version(name: str) -> str:
        if name == WB.FAST:
            raise WB.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(WB.metadata, "version", version)
    monkeypatch.setitem(sys.modules, "nanotoken", None)  # `import nanotoken` raises ImportError
    assert WB.choose_backend(spec.json).name == WB.HF
    # a worker told to use nanotoken where it is missing: tokenizers, the same ids, one line of its own
    tok = DocumentTokenizer(spec, backend=WB.FAST)
    assert tok.backend.name == WB.HF
    got = tok(docs, Counter())
    DocumentTokenizer(spec, backend=WB.FAST)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "tokenizer:" in ln]
    assert len(lines) == 2 and "not installed (pip install nanotoken)" in lines[0] and "this worker" in lines[1]
    assert np.array_equal(got.ids, fast.ids)


def test_the_environment_variable_chooses_and_a_bad_value_is_one_error_line(demo_vocab, monkeypatch):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    assert WB.choose_backend(spec.json).name == WB.FAST
    assert WB.choose_backend(spec.json, offsets=True).name == WB.HF  # offsets: only tokenizers has them
    monkeypatch.setenv(WB.ENV, "hf")
    assert DocumentTokenizer(spec).backend.name == WB.HF
    monkeypatch.setenv(WB.ENV, "FAST")
    assert DocumentTokenizer(spec).backend == WB.backend(WB.FAST)
    monkeypatch.setenv(WB.ENV, "rust")
    with pytest.raises(VocabError, match="BERTSTREAM_TOKENIZER_BACKEND='rust' must be one of auto, fast, hf"):
        WB.choose_backend(spec.json)


def test_bert_tokenizer_jsons_are_supported(demo_vocab):
    for source, lowercase in [("vocab.txt", True), ("vocab.txt", False), ("tokenizer.json", None)]:
        assert WB.fast_unsupported(load_tokenizer(str(demo_vocab / source), lowercase).json) is None
    # a published tokenizer.json (BertTokenizerFast.save_pretrained) with its post-processor and decoder
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertTokenizerFast(vocab_file=str(demo_vocab / "vocab.txt"), do_lower_case=True)
    assert WB.fast_unsupported(hf.backend_tokenizer.to_str()) is None


# ------------------------------------------------------------------------------- DocumentTokenizer, runs


def demo_docs(corpus: Path) -> list[tuple[str, list[str]]]:
    docs = []
    for path in sorted(corpus.glob("*.txt")):
        for d in read_documents(str(path), "text", Counter()):
            docs.append((d.doc_id, [s for p in d.paragraphs for s in split_sentences(p)]))
    return docs


def shared_docs() -> list[tuple[str, list[str]]]:
    """Two Wikipedia files and a book, segmented as the pipeline segments them (with `[SEP]` typed in text)."""
    docs = []
    for name, fmt in [("wikipedia/wiki_03", "wikiextractor"), ("wikipedia/wiki_11", "wikiextractor")]:
        for d in read_documents(str(shared_path("pretrain", *name.split("/"))), fmt, Counter()):
            docs.append((d.doc_id, [s for p in d.paragraphs for s in split_sentences(p)]))
    book = shared_path("pretrain", "gutenberg", "2701-0.txt")
    for d in read_documents(str(book), "text", Counter()):
        docs.append((d.doc_id, [s for p in d.paragraphs for s in split_sentences(p)]))
    return docs + [("typed", ["A [SEP] typed [CLS] in text.", "", "[MASK]"])]


def assert_same_batches(spec: TokenizerSpec, docs: list[tuple[str, list[str]]]) -> None:
    fast_counters, hf_counters = Counter(), Counter()
    fast = DocumentTokenizer(spec, backend=WB.FAST)
    hf = DocumentTokenizer(spec, backend=WB.HF)
    assert (fast.backend.name, hf.backend.name) == (WB.FAST, WB.HF)
    a, b = fast(docs, fast_counters), hf(docs, hf_counters)
    assert a.doc_ids == b.doc_ids and len(a.doc_ids) > 0
    assert a.ids.dtype == b.ids.dtype and np.array_equal(a.ids, b.ids)
    assert np.array_equal(a.sentence_lengths, b.sentence_lengths) and np.array_equal(a.doc_sentences, b.doc_sentences)
    assert a.unk_words == b.unk_words and fast_counters == hf_counters


def test_document_tokenizer_output_identical_with_either_backend(demo_vocab, demo_corpus):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    docs = demo_docs(demo_corpus)
    assert_same_batches(spec, docs)
    assert_same_batches(spec, [(d, [s.upper() for s in ss]) for d, ss in docs[:200]])  # many [UNK]s


@pytest.mark.shared_data
def test_document_tokenizer_output_identical_with_either_backend_on_shared_text(wiki_vocab):
    """Books take several encode calls and pieces per document (DocumentTokenizer.ENCODE_CHARS, PIECE_CHARS)."""
    assert_same_batches(load_tokenizer(str(wiki_vocab / "vocab.txt")), shared_docs())
    if (SHARED / "vocab" / "bert-base-chinese-vocab.txt").exists():
        zh = load_tokenizer(str(SHARED / "vocab" / "bert-base-chinese-vocab.txt"))
        path = shared_path("pretrain", "chinese", "CLUECorpusSmall_bert_sampled.txt")
        assert_same_batches(zh, [(d.doc_id, d.paragraphs) for d in read_documents(str(path), "sentences", Counter())])


def test_the_word_segmenter_path_encodes_with_tokenizers(demo_vocab):
    pytest.importorskip("rjieba")
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    tok = DocumentTokenizer(spec, "rjieba")
    # nanotoken gives no offsets; the segmenter's marks need them
    assert tok.backend.name == WB.HF and tok.encoder.backend.name == WB.HF


def test_concurrent_threads_and_the_thread_pool_give_the_same_ids(demo_vocab, demo_corpus):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    texts = [s for _, ss in demo_docs(demo_corpus) for s in ss]
    chunks = [texts[i::8] for i in range(8)]
    serial = WB.WordPieceEncoder(spec.json, WB.FAST, threads=1)
    pooled = WB.WordPieceEncoder(spec.json, WB.FAST, threads=2)  # nanotoken's own thread pool
    want = [hf_ids(spec.json, c) for c in chunks]
    with ThreadPoolExecutor(4) as ex:  # four Python threads in one encoder at once, as Beam's bundle threads may
        got = list(ex.map(lambda ic: (serial if ic[0] % 2 else pooled).encode(ic[1]), enumerate(chunks * 3)))
    for (ids, offsets), (ref_ids, ref_offsets) in zip(got, want * 3):
        assert np.array_equal(ids, ref_ids) and np.array_equal(offsets, ref_offsets)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_encodes_on_its_own_thread_after_the_parent_used_the_pool(demo_vocab, demo_corpus):
    """A pool started before fork() has no threads in the child: the encoder must not wait on it there."""
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    texts = [s for _, ss in demo_docs(demo_corpus) for s in ss]
    enc = WB.WordPieceEncoder(spec.json, WB.FAST, threads=2)
    want = enc.encode(texts)  # the pool now exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        ok = False
        try:
            threading.Timer(60, lambda: os._exit(3)).start()
            ids, offsets = enc.encode(texts)
            ok = np.array_equal(ids, want[0]) and np.array_equal(offsets, want[1])
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"1", "the forked child's ids differ, or it hung"


def shard_digests(out: Path) -> dict[str, str]:
    import hashlib

    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.suffix in (".arrow", ".tar")
    }


def test_worker_processes_without_nanotoken_and_the_hf_backend_give_the_same_shards(
    tmp_path, demo_corpus, demo_vocab, monkeypatch, capfd
):
    """Beam's multi_processing workers are fresh processes: each loads nanotoken and encodes on its own thread.
    Workers that lack it encode with `tokenizers` (the same shards), say so, and the manifest counts them."""
    files = [str(f) for f in sorted(demo_corpus.glob("*.txt"))]
    cfg = PretrainingConfig(input_format="text", dupe_factor=1, num_shards=2, output_format="both")
    vocab = str(demo_vocab / "vocab.txt")
    two = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    # Workers that have nanotoken use it: tests/pipelines/pretraining/test_pipeline.py's two-worker run
    a = run_pretraining(PretrainingJob(inputs=tuple(files), vocab=vocab, output=str(tmp_path / "a"), config=cfg))
    assert "tokenizer:" not in capfd.readouterr().err
    monkeypatch.setenv(WB.ENV, "hf")
    c = run_pretraining(PretrainingJob(inputs=tuple(files), vocab=vocab, output=str(tmp_path / "c"), config=cfg))
    monkeypatch.delenv(WB.ENV)
    fake = tmp_path / "no_nanotoken" / "nanotoken"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not on this worker')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]))
    d = run_pretraining(
        PretrainingJob(inputs=tuple(files), vocab=vocab, output=str(tmp_path / "d"), config=cfg, beam_args=tuple(two))
    )
    said = [ln for ln in capfd.readouterr().err.splitlines() if "tokenizer:" in ln]
    assert 1 <= len(said) <= 2 and all("not installed on this worker" in ln for ln in said), said  # one a process
    assert len(shard_digests(tmp_path / "a")) == 4
    assert shard_digests(tmp_path / "a") == shard_digests(tmp_path / "c")
    assert shard_digests(tmp_path / "a") == shard_digests(tmp_path / "d")
    assert a.manifest.counters == c.manifest.counters
    assert a.manifest.run["tokenizer"] == WB.backend(WB.FAST).entry()
    assert c.manifest.run["tokenizer"] == WB.backend(WB.HF).entry()
    fallback = d.manifest.counters.pop(C.TOKENIZER_FALLBACK)
    assert fallback == a.manifest.counters[C.DOCUMENTS_READ] and d.manifest.counters == a.manifest.counters
    assert d.manifest.run["tokenizer"] == {**WB.backend(WB.FAST).entry(), "fallback_documents": fallback}


@pytest.mark.parametrize("value", ["rust", "fast"])
def test_bertprep_refuses_a_backend_it_cannot_honour_in_one_error_line(tmp_path, demo_corpus, demo_vocab, value):
    from click.testing import CliRunner

    from bertstream.pipelines.cli import main

    data = json.loads((demo_vocab / "tokenizer.json").read_text(encoding="utf-8"))
    data["pre_tokenizer"] = {"type": "Whitespace"}
    vocab = tmp_path / "tokenizer.json"
    vocab.write_text(json.dumps(data), encoding="utf-8")
    args = ["pretraining", "--input", str(demo_corpus / "a*.txt"), "--format", "text", "--vocab", str(vocab)]
    r = CliRunner().invoke(main, [*args, "--output", str(tmp_path / "out")], env={WB.ENV: value})
    errors = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert r.exit_code == 2 and len(errors) == 1, r.output
    assert (f"{WB.ENV}='rust' must be one of" if value == "rust" else "nanotoken cannot encode it exactly") in errors[0]
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_nanotoken_refuses_to_load_falls_back(demo_vocab, monkeypatch, capsys):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))

    def refuse(_json: str):
        raise nanotoken.UnsupportedTokenizerError("not this one")

    monkeypatch.setattr(WB, "_fast_tokenizer", refuse)
    assert WB.choose_backend(spec.json, source="v.txt").name == WB.HF
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "tokenizer:" in ln]
    assert len(lines) == 1 and "cannot load it (UnsupportedTokenizerError: not this one)" in lines[0], lines
