"""Tiny task datasets built from the shared real data with the pipelines (once per session), and a helper
to run ``finetune`` on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import shared_path

CONLL_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


def head_lines(src: Path, dst: Path, n: int) -> Path:
    with src.open(encoding="utf-8") as f:
        dst.write_text("".join(line for _, line in zip(range(n), f)), encoding="utf-8")
    return dst


def head_sentences(src: Path, dst: Path, n: int) -> Path:
    """The first ``n`` blank-line-separated blocks of a CoNLL file (``-DOCSTART-`` blocks count too)."""
    out, blocks = [], 0
    with src.open(encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if not line.strip():
                blocks += 1
                if blocks >= n:
                    break
    dst.write_text("".join(out), encoding="utf-8")
    return dst


def conll_sentences(path: Path) -> list[list[tuple[str, str]]]:
    """(word, tag) pairs of each sentence of a CoNLL file (the tag is the last column: CoNLL-2003's four
    columns, People's Daily's two), read independently of the pipeline."""
    out, cur = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if cur:
                out.append(cur)
            cur = []
        else:
            f = line.split()
            cur.append((f[0], f[-1]))
    return out + ([cur] if cur else [])


@pytest.fixture(scope="session")
def task_vocab(tmp_path_factory) -> Path:
    """A 4,000-token uncased WordPiece vocabulary trained on one shared Wikipedia file (a few seconds)."""
    from bertstream.pipelines.vocab import VocabConfig, train_vocab

    out = tmp_path_factory.mktemp("task_vocab")
    train_vocab(
        [str(shared_path("pretrain", "wikipedia", "wiki_00"))],
        out,
        VocabConfig(input_format="wikiextractor", vocab_size=4000),
    )
    return out / "vocab.txt"


@pytest.fixture(scope="session")
def sst2(tmp_path_factory, task_vocab) -> dict[str, Path]:
    """SST-2: 320 training rows, 200 dev rows, 60 unlabeled test rows (real GLUE files, first lines)."""
    from tests.jobs import run_classification

    root = tmp_path_factory.mktemp("sst2")
    src = shared_path("tasks", "sst2")
    out = {}
    for split, n in (("train", 321), ("dev", 201), ("test", 61)):
        tsv = head_lines(src / f"{split}.tsv", root / f"{split}.tsv", n)
        out[split] = root / f"{split}_data"
        run_classification(
            inputs=[str(tsv)],
            vocab=str(task_vocab),
            output=str(out[split]),
            glue="sst2",
            split=split,
            max_seq_length=64,
        )
    return out


@pytest.fixture(scope="session")
def conll(tmp_path_factory, task_vocab) -> dict[str, Path]:
    """CoNLL-2003: ~200 training and ~300 validation sentences, short windows so long sentences are split."""
    from tests.jobs import run_ner

    root = tmp_path_factory.mktemp("conll")
    src = shared_path("tasks", "conll2003")
    train = head_sentences(src / "train.txt", root / "train.txt", 200)
    valid = head_sentences(src / "valid.txt", root / "valid.txt", 300)
    out = {"train": root / "train_data", "valid": root / "valid_data"}
    run_ner(
        inputs=[str(train)],
        vocab=str(task_vocab),
        output=str(out["train"]),
        split="train",
        labels=CONLL_LABELS,
        max_seq_length=24,
        window_overlap=4,
    )
    run_ner(
        inputs=[str(valid)],
        vocab=str(task_vocab),
        output=str(out["valid"]),
        split="valid",
        label_set_from=str(out["train"]),
        max_seq_length=24,
        window_overlap=4,
        num_shards=2,
    )
    return out


@pytest.fixture(scope="session")
def squad(tmp_path_factory, task_vocab) -> dict[str, Path]:
    """SQuAD v1.1 dev split by article: Warsaw + Normans (359 questions) to train, Sky (108) to evaluate."""
    from tests.jobs import run_squad

    root = tmp_path_factory.mktemp("squad")
    src = str(shared_path("tasks", "squad_v1.1", "dev-v1.1.json"))
    out = {"train": root / "train_data", "dev": root / "dev_data"}
    common = {
        "inputs": [src],
        "vocab": str(task_vocab),
        "max_seq_length": 128,
        "doc_stride": 48,
        "max_query_length": 32,
    }
    run_squad(**common, output=str(out["train"]), articles=(1, 3), split="train")
    run_squad(**common, output=str(out["dev"]), articles=(8, 9), split="dev", num_shards=2)
    return out


def finetune_run(task: str, train: Path, evaluation: Path, out: Path, **kw):
    """One quick CPU run (1 epoch, random tiny encoder unless ``init`` is given); returns results.json's dict."""
    from bertstream.trainer.finetune.config import FinetuneConfig
    from bertstream.trainer.finetune.loop import finetune

    cfg = FinetuneConfig.build(
        **{
            "task": task,
            "train_data": str(train),
            "eval_data": str(evaluation),
            "init": "random:tiny",
            "output": str(out),
            "epochs": 1,
            "batch_size": 16,
            "lr": 1e-3,
            "tensorboard": False,
            "log_every": 5,
            **kw,
        }
    )
    return finetune(cfg)
