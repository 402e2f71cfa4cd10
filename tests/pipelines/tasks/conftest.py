"""Task pipeline runs shared by several test modules (each runs once per session) and small helpers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest

from bertstream.schemas.manifest import Manifest
from tests.conftest import shared_path
from tests.jobs import run_classification, run_ner, run_squad


def read_rows(out: Path, manifest: Manifest) -> pa.Table:
    """Every row of a task dataset, in manifest order (as the trainer reads it: pyarrow only)."""
    return pa.concat_tables(pa.ipc.open_file(out / s.path).read_all() for s in manifest.shards)


def shard_digests(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.suffix in (".arrow", ".jsonl")
    }


def read_examples(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "examples.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="session")
def sst2_dev(tmp_path_factory, wiki_vocab):
    out = tmp_path_factory.mktemp("sst2_dev")
    r = run_classification(
        inputs=[str(shared_path("tasks", "sst2", "dev.tsv"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(out),
        glue="sst2",
        num_shards=2,
    )
    return r.manifest, out


@pytest.fixture(scope="session")
def conll_train(tmp_path_factory, wiki_vocab):
    """CoNLL train with short windows: the label set comes from here."""
    out = tmp_path_factory.mktemp("conll_train")
    r = run_ner(
        inputs=[str(shared_path("tasks", "conll2003", "train.txt"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(out),
        max_seq_length=32,
        window_overlap=4,
    )
    return r.manifest, out


@pytest.fixture(scope="session")
def conll_valid(tmp_path_factory, wiki_vocab, conll_train):
    """CoNLL valid as an evaluation split, with short windows so that many sentences are split."""
    out = tmp_path_factory.mktemp("conll_valid")
    r = run_ner(
        inputs=[str(shared_path("tasks", "conll2003", "valid.txt"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(out),
        max_seq_length=24,
        window_overlap=3,
        label_set_from=str(conll_train[1]),
        num_shards=2,
    )
    return r.manifest, out


@pytest.fixture(scope="session")
def squad_eval(tmp_path_factory, wiki_vocab):
    """SQuAD dev articles 40:48 as an evaluation split, short windows so that contexts need several."""
    out = tmp_path_factory.mktemp("squad_eval")
    r = run_squad(
        inputs=[str(shared_path("tasks", "squad_v1.1", "dev-v1.1.json"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(out),
        articles=(40, 48),
        split="dev",
        max_seq_length=128,
        doc_stride=48,
        max_query_length=32,
        num_shards=2,
    )
    return r.manifest, out
