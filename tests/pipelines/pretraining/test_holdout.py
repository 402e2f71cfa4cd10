"""``--eval-fraction``: whole documents held out, by a seeded hash of their id, into a second complete dataset
(``OUTPUT/eval``) written by the same run."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.cli import _print_summary
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.dataset import load_manifest
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.output_dir import check_output
from bertstream.pipelines.inputs.documents import Document, DocumentBatch
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.holdout import EVAL_DIR, held_out, split_batch
from bertstream.pipelines.pretraining.instances import document_key, instance_id
from bertstream.pipelines.pretraining.pipeline import POLICY, run_pretraining
from bertstream.pipelines.report.inspection import verify_shard
from bertstream.schemas import pretraining as P
from bertstream.schemas.manifest import MANIFEST_NAME

SEED = 12345
FRACTION = 0.2
DUPE = 3  # conftest's demo_shards: the same corpus and parameters without the option


def _job(inputs: list[Path], vocab: Path, out: Path, beam_args: tuple[str, ...] = (), **kw) -> PretrainingJob:
    values = {"input_format": "text", "dupe_factor": DUPE, "num_shards": 3, "output_format": "both", **kw}
    return PretrainingJob(
        inputs=tuple(str(i) for i in inputs),
        vocab=str(vocab),
        output=str(out),
        config=PretrainingConfig(**values),
        beam_args=beam_args,
    )


def _instance_ids(dataset: Path) -> list[int]:
    m = load_manifest(str(dataset))
    return [
        i
        for s in m.shards_of("arrow")
        for i in pa.ipc.open_file(dataset / s.path).read_all()[P.INSTANCE_ID].to_pylist()
    ]


def _documents_of(ids: list[int], doc_ids: list[str]) -> set[str]:
    """The documents that instance ids were made from: a document's ids are a seeded hash of it, the pass and
    the index 0, 1, ... of its instances in that pass."""
    wanted, found = set(ids), set()
    for d in doc_ids:
        for p in range(DUPE):
            i = 0
            while (n := instance_id(document_key(SEED, d), p, i)) in wanted:
                wanted.discard(n)
                found.add(d)
                i += 1
    assert not wanted, "instances of no document of the corpus"
    return found


def test_the_choice_is_a_seeded_hash_of_the_document_id():
    ids = [f"book-{i}.txt" for i in range(4000)]
    chosen = {d for d in ids if held_out(SEED, d, FRACTION)}
    assert abs(len(chosen) / len(ids) - FRACTION) < 0.03
    assert chosen == {d for d in reversed(ids) if held_out(SEED, d, FRACTION)}  # not the order
    assert chosen != {d for d in ids if held_out(SEED + 1, d, FRACTION)}  # the seed
    assert chosen < {d for d in ids if held_out(SEED, d, 0.5)}  # a larger fraction holds out more, the same first


def test_split_batch_puts_every_document_on_one_side_and_counts_it():
    docs = [Document(f"d{i}", [f"text {i}."]) for i in range(200)]
    train, held = split_batch(DocumentBatch(docs, Counter({C.DOCUMENTS_READ: 200, C.BYTES_READ: 999})), SEED, 0.3)
    assert sorted(d.doc_id for d in train.documents + held.documents) == sorted(d.doc_id for d in docs)
    assert {d.doc_id for d in held.documents} == {d.doc_id for d in docs if held_out(SEED, d.doc_id, 0.3)}
    assert 0 < len(held.documents) < 200
    assert train.counters == {C.DOCUMENTS_READ: 200, C.BYTES_READ: 999, C.DOCUMENTS_HELD_OUT: len(held.documents)}
    assert held.counters == {C.DOCUMENTS_READ: len(held.documents)}


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_a_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(UsageError, match=rf"eval_fraction.*must be in \(0, 1\).*got {fraction}"):
        PretrainingConfig(eval_fraction=fraction)


@pytest.fixture(scope="module")
def held_run(tmp_path_factory, demo_corpus, demo_vocab):
    out = tmp_path_factory.mktemp("held_out")
    workers = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")
    job = _job([demo_corpus / "*.txt"], demo_vocab / "vocab.txt", out, workers, eval_fraction=FRACTION)
    return run_pretraining(job), out


def test_one_run_writes_two_complete_datasets(held_run, capsys):
    result, out = held_run
    for folder in (out, out / EVAL_DIR):
        m = load_manifest(str(folder))
        assert (folder / "vocab.txt").read_bytes() == (out / "vocab.txt").read_bytes()
        assert m.totals["instances"] > 0 and len(m.shards_of("arrow")) == len(m.shards_of("webdataset")) == 3
        assert not [c for s in m.shards if (c := verify_shard(str(folder), s, m)).problems]
    train, held = result.manifest, load_manifest(str(out / EVAL_DIR))
    assert (train.parameters["split"], held.parameters["split"]) == ("train", "eval")
    assert train.parameters["eval_fraction"] == held.parameters["eval_fraction"] == FRACTION
    assert train.run["run_id"] == held.run["run_id"]  # one run, the input read once
    assert train.run["worker_processes"] == 2
    assert "input_mb_per_s" in train.run and "input_mb_per_s" not in held.run  # the reading is the run's, once
    _print_summary(result)  # what bertprep pretraining prints at the end
    moved, instances = held.counters[C.DOCUMENTS_READ], held.totals["instances"]
    assert (
        f"held out: {moved} documents, {instances} instances: {out / EVAL_DIR}/manifest.json" in capsys.readouterr().out
    )
    assert not (out / "_work").exists()


def test_every_document_is_in_exactly_one_dataset(held_run, demo_shards, demo_corpus):
    result, out = held_run
    train, held, whole = result.manifest.counters, load_manifest(str(out / EVAL_DIR)).counters, None
    whole = load_manifest(str(demo_shards)).counters  # the same run without --eval-fraction
    moved = train[C.DOCUMENTS_HELD_OUT]
    assert held[C.DOCUMENTS_READ] == moved > 0
    assert "held_out" not in C.dropped(train)  # held out is not dropped: nothing was lost
    assert train[C.DOCUMENTS_READ] == whole[C.DOCUMENTS_READ] == 79
    assert train[C.DOCUMENTS_READ] == train[C.DOCUMENTS_USED] + sum(C.dropped(train).values()) + moved
    assert held[C.DOCUMENTS_READ] == held[C.DOCUMENTS_USED] + sum(C.dropped(held).values())
    assert train[C.DOCUMENTS_USED] + held[C.DOCUMENTS_USED] == whole[C.DOCUMENTS_USED]
    # The documents behind the instances: disjoint, the held-out ones exactly those the hash chooses (with two
    # worker processes as in one), together those of the run without the option.
    doc_ids = [p.name for p in sorted(demo_corpus.glob("*.txt"))]
    train_docs = _documents_of(_instance_ids(out), doc_ids)
    held_docs = _documents_of(_instance_ids(out / EVAL_DIR), doc_ids)
    assert not train_docs & held_docs
    assert held_docs == {d for d in doc_ids if held_out(SEED, d, FRACTION)} and len(held_docs) == moved
    assert train_docs | held_docs == _documents_of(_instance_ids(demo_shards), doc_ids)


def test_summaries_say_held_out_documents_apart_from_drops(held_run):
    from bertstream.pipelines.report.inspection import summary_lines

    result, _ = held_run
    moved = result.manifest.counters[C.DOCUMENTS_HELD_OUT]
    line = next(line for line in summary_lines(result.manifest) if line.startswith("documents:"))
    assert f"{moved} held out for evaluation" in line and "held_out" not in line, line


def test_a_hold_out_that_leaves_one_side_empty_is_refused(tmp_path, demo_corpus, demo_vocab):
    doc_ids = [p.name for p in sorted(demo_corpus.glob("*.txt"))]
    # A few topics, none of which a tiny fraction holds out: the evaluation dataset would be empty.
    kept = [d for d in doc_ids if not held_out(SEED, d, 0.01)][:4]
    job = _job([demo_corpus / d for d in kept], demo_vocab / "vocab.txt", tmp_path / "out", eval_fraction=0.01)
    with pytest.raises(InputError, match=r"^--eval-fraction 0.01 leaves the evaluation dataset without instances"):
        run_pretraining(replace(job, config=replace(job.config, dupe_factor=1)))
    assert not (tmp_path / "out").exists()  # neither dataset published, no folder left


def test_the_eval_folder_is_the_runs_own(tmp_path):
    """A run without the option replaces an earlier run's ``OUTPUT/eval`` too: two runs never mix."""
    (tmp_path / EVAL_DIR).mkdir()
    (tmp_path / EVAL_DIR / MANIFEST_NAME).write_text("{}")
    with pytest.raises(UsageError, match="leftovers of an unfinished run"):
        check_output(str(tmp_path), False, POLICY)
    assert check_output(str(tmp_path), True, POLICY) == [str(tmp_path / EVAL_DIR)]
