"""Byte-identical output, pinned: the sha256 of every shard written from a small fixed input.

Refactors promise "no behaviour change"; this is where that promise is checked. The inputs are real text
that every Python carries (``pydoc_data``) and a vocabulary built here by plain word counting, so the pins
depend on neither ``../shared`` nor the ``tokenizers`` trainer. A pin changes only with a deliberate
change of output (then say so in the commit, and bump the schema version if readers must change).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bertstream.pipelines.demo_corpus import write_pydoc_corpus
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
from bertstream.schemas.vocab import SPECIAL_TOKENS
from tests.jobs import run_classification, run_ner, run_squad

_WORD = re.compile(r"[a-z]+|[^a-z\s]")


def _digests(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(out.iterdir())
        if p.suffix in (".arrow", ".tar", ".jsonl")
    }


# The pins were taken on this text (Python 3.11's pydoc_data); another Python ships other documentation.
CORPUS_SHA256 = "b42fa3a763995a87"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pin_corpus")
    paths = write_pydoc_corpus(d)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(paths))).hexdigest()[:16]
    if digest != CORPUS_SHA256:
        pytest.skip(f"the pins were taken on another pydoc_data (corpus sha256 {digest}, pinned {CORPUS_SHA256})")
    return d


@pytest.fixture(scope="module")
def vocab(tmp_path_factory, corpus) -> str:
    """Specials, every character alone and as ``##c``, then the 1,500 commonest lower-cased words."""
    counts: Counter[str] = Counter()
    chars: set[str] = set()
    for p in sorted(corpus.glob("*.txt")):
        text = p.read_text(encoding="utf-8").lower()
        counts.update(_WORD.findall(text))
        chars.update(c for c in text if not c.isspace())
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if len(w) > 1][:1500]
    singles = sorted(chars)
    tokens = [*SPECIAL_TOKENS, *singles, *(f"##{c}" for c in singles), *[w for w in words if w not in chars]]
    out = tmp_path_factory.mktemp("pin_vocab") / "vocab.txt"
    out.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return str(out)


def _paragraphs(corpus: Path, n: int) -> list[str]:
    paras = []
    for p in sorted(corpus.glob("*.txt")):
        paras += [" ".join(b.split()) for b in p.read_text(encoding="utf-8").split("\n\n") if len(b.split()) > 12]
    return paras[:n]


PRETRAINING = {
    "pretrain-00000-of-00002.arrow": "4a9a0064419fc10f",
    "pretrain-00000-of-00002.tar": "f065e29e18e16b95",
    "pretrain-00001-of-00002.arrow": "926cd930d1e24460",
    "pretrain-00001-of-00002.tar": "3889aa8b01caa26b",
}


# The pretraining tokenizer's backends (pipelines.tokenizer.wordpiece_backend): the same pins with either. The task
# pipelines always encode with `tokenizers` (they need offsets).
BACKENDS = {"fast": "nanotoken", "hf": "tokenizers"}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_pretraining_shards_are_pinned(tmp_path, corpus, vocab, backend, monkeypatch):
    monkeypatch.setenv("BERTSTREAM_TOKENIZER_BACKEND", backend)
    cfg = PretrainingConfig(input_format="text", dupe_factor=2, num_shards=2, output_format="both", seed=7)
    result = run_pretraining(
        PretrainingJob(inputs=(str(corpus / "*.txt"),), vocab=vocab, output=str(tmp_path / "out"), config=cfg)
    )
    got = _digests(tmp_path / "out")
    print(json.dumps(got, indent=1))
    assert got == PRETRAINING
    assert result.manifest.run["tokenizer"]["backend"] == BACKENDS[backend]


CLASSIFICATION = {
    "classification-00000-of-00002.arrow": "e48c861e5c5c4eee",
    "classification-00001-of-00002.arrow": "1f31922a279cd5c7",
}


def test_classification_shards_are_pinned(tmp_path, corpus, vocab):
    rows = ["sentence\tlabel"] + [f"{p[:300]}\t{i % 2}" for i, p in enumerate(_paragraphs(corpus, 60))]
    src = tmp_path / "train.tsv"
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    run_classification(inputs=[str(src)], vocab=vocab, output=str(tmp_path / "out"), glue="sst2", num_shards=2)
    got = _digests(tmp_path / "out")
    print(json.dumps(got, indent=1))
    assert got == CLASSIFICATION


NER = {"ner-00000-of-00001.arrow": "84c0f32465a83eb1"}


def test_ner_shards_are_pinned(tmp_path, corpus, vocab):
    tags = ("O", "B-MISC", "I-MISC", "O", "B-PER")
    lines = ["-DOCSTART- -X- -X- O", ""]
    for p in _paragraphs(corpus, 40):
        words = p.split()[:30]
        lines += [
            f"{w} NN B-NP {'O' if i == 0 and tags[i % 5].startswith('I') else tags[i % 5]}" for i, w in enumerate(words)
        ]
        lines.append("")
    src = tmp_path / "train.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_ner(inputs=[str(src)], vocab=vocab, output=str(tmp_path / "out"), max_seq_length=32, window_overlap=4)
    got = _digests(tmp_path / "out")
    print(json.dumps(got, indent=1))
    assert got == NER


SQUAD = {"examples.jsonl": "b959688f68b5f313", "squad-00000-of-00001.arrow": "912fa6a24695fa93"}


def test_squad_shards_are_pinned(tmp_path, corpus, vocab):
    paragraphs = []
    for i, ctx in enumerate(_paragraphs(corpus, 30)):
        words = ctx.split()
        answer = " ".join(words[5:8])
        qas = [
            {
                "id": f"q{i}",
                "question": " ".join(words[:6]) + "?",
                "answers": [{"text": answer, "answer_start": ctx.index(answer)}],
            }
        ]
        paragraphs.append({"context": ctx, "qas": qas})
    src = tmp_path / "train-v1.1.json"
    src.write_text(
        json.dumps({"version": "1.1", "data": [{"title": "pydoc", "paragraphs": paragraphs}]}), encoding="utf-8"
    )
    run_squad(
        inputs=[str(src)],
        vocab=vocab,
        output=str(tmp_path / "out"),
        max_seq_length=64,
        doc_stride=24,
        max_query_length=16,
    )
    got = _digests(tmp_path / "out")
    print(json.dumps(got, indent=1))
    assert got == SQUAD
