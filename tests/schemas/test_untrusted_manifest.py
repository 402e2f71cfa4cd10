"""A manifest is untrusted input: every path it names stays inside the dataset folder, every field is type- and
range-checked with one line naming it, counts are what the shards hold, and shard rows are range-checked.

Each case goes through both sides' readers: the trainer's (``open_catalog``, ``open_shard``, the vocabulary
through ``trainer.data.refs``) and ``bertprep inspect``'s (``pipelines.report.inspection``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.lib.synthetic_shards import Instances, bert_like_vocab, make_instances, write_dataset
from bertstream.pipelines.report import inspection
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, load_vocab
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import VocabMismatchError
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.refs import ShardError, read_text
from bertstream.trainer.data.shards import open_shard
from bertstream.trainer.data.sources import open_catalog

COUNTS = (30, 20)


@pytest.fixture(scope="module")
def vocab():
    return bert_like_vocab(1100)


@pytest.fixture
def dataset(tmp_path, vocab) -> Path:
    root = tmp_path / "ds"
    write_dataset(
        root,
        make_instances(sum(COUNTS), seed=3, vocab=vocab, max_len=32),
        COUNTS,
        vocab=vocab,
        parameters={"max_seq_length": 32, "max_predictions_per_seq": 5, "seed": 0},
    )
    return root


def edit(root: Path, change) -> None:
    d = json.loads((root / MANIFEST_NAME).read_text())
    change(d)
    (root / MANIFEST_NAME).write_text(json.dumps(d))


def trainer_reads(root: Path) -> None:
    """What ``berttrain pretrain`` reads: the catalog, the vocabulary, every shard the plan reads (it counts on
    the manifest: a shard counted empty gets no sample)."""
    cat = open_catalog(DataConfig(paths=(str(root),), batch_size=1, verify="size"), expected_vocab_sha256=None)
    m = cat.manifests[0]
    load_vocab(m, lambda name: read_text(str(root), name), "vocab")
    for ref in (r for r in cat.shards if r.count):
        open_shard(ref, verify_sha256=True, vocab_sha256=cat.vocab_sha256, id_type=cat.id_type)


def inspect_verifies(root: Path) -> list[str]:
    """What ``bertprep inspect --verify`` reports: the problems found (an exception for an unreadable manifest)."""
    m = Manifest.from_json((root / MANIFEST_NAME).read_text(), source=str(root / MANIFEST_NAME))
    problems = [p for s in m.shards for p in inspection.verify_shard(str(root), s, m).problems]
    try:
        inspection.load_vocab(str(root), m)
    except inspection.DatasetError as e:
        problems.append(str(e))
    return problems


def test_the_untouched_dataset_reads(dataset):
    trainer_reads(dataset)
    assert inspect_verifies(dataset) == []


def _outside_vocab(root: Path) -> None:
    (root.parent / "elsewhere").mkdir()
    (root / "vocab.txt").rename(root.parent / "elsewhere" / "vocab.txt")


PATHS = {
    "dotdot": (
        lambda r: (_outside_vocab(r), edit(r, lambda d: d["vocab"].update(file="../elsewhere/vocab.txt"))),
        "vocab.file: '../elsewhere/vocab.txt' leaves the dataset folder",
    ),
    "absolute": (
        lambda r: edit(r, lambda d: d["vocab"].update(file="/etc/passwd")),
        "vocab.file: '/etc/passwd' leaves",
    ),
    "link out": (
        lambda r: (_outside_vocab(r), (r / "vocab.txt").symlink_to(r.parent / "elsewhere" / "vocab.txt")),
        "a link out of the dataset folder",
    ),
    "device": (
        lambda r: ((r / "vocab.txt").unlink(), (r / "vocab.txt").symlink_to("/dev/zero")),
        "a link out of the dataset folder",
    ),
    "fifo": (lambda r: ((r / "vocab.txt").unlink(), __import__("os").mkfifo(r / "vocab.txt")), "not a regular file"),
    "shard link": (lambda r: _link_shard_out(r), "a link out of the dataset folder"),
}


def _link_shard_out(root: Path) -> None:
    shard = root / "pretrain-00000-of-00002.arrow"
    moved = root.parent / "moved.arrow"
    shard.rename(moved)
    shard.symlink_to(moved)


@pytest.mark.parametrize("case", PATHS)
def test_every_path_a_manifest_names_stays_inside_the_dataset_folder(dataset, case):
    change, message = PATHS[case]
    change(dataset)
    with pytest.raises((SchemaError, ShardError), match=message):
        trainer_reads(dataset)
    try:
        problems = inspect_verifies(dataset)
    except SchemaError as e:
        problems = [str(e)]
    assert any(message in p for p in problems), problems


FIELDS = {
    "count 10**30": (
        lambda d: d["shards"][0].update(count=10**30),
        r"shards\[0\].count: 1000000000000000000000000000000 is",
    ),
    "parameters null": (lambda d: d.update(parameters=None), "parameters: expected an object, got None"),
    "max_seq_length string": (
        lambda d: d["parameters"].update(max_seq_length="64"),
        "parameters.max_seq_length: expected an integer, got '64'",
    ),
    "pad id": (lambda d: d["vocab"]["special_ids"].update({"[PAD]": 10**6}), r"vocab.special_ids.\[PAD\]: 1000000 is"),
    "schema version string": (lambda d: d.update(schema_version="1"), "schema version '1' is a string"),
    "schema version bool": (lambda d: d.update(schema_version=True), "schema version True is a bool"),
    "vocab size 10**9": (lambda d: d["vocab"].update(size=10**9), "vocab.id_type: uint16 does not match vocab.size"),
    "seed float": (lambda d: d.update(seed=1.5), "seed: expected an integer, got 1.5"),
    "sha256 upper": (lambda d: d["shards"][1].update(sha256=d["shards"][1]["sha256"].upper()), r"shards\[1\].sha256"),
    "masked_lm_prob": (lambda d: d["parameters"].update(masked_lm_prob=float("inf")), "masked_lm_prob: inf is outside"),
    "shard extra key": (lambda d: d["shards"][0].update(evil=1), r"shards\[0\]: unknown field 'evil'"),
    "kind": (lambda d: d.update(kind=["pretraining"]), "kind: expected a string"),
    "task labels": (lambda d: d.update(task={"labels": [0, 1]}), r"task.labels\[0\]: expected a string"),
    "task file": (
        lambda d: d.update(task={"files": [{"path": "../x", "sha256": "0" * 64, "count": 1, "role": "e"}]}),
        r"task.files\[0\].path: '../x' leaves",
    ),
    # the statistics the report and inspect print and plot (issue 53): NaN and 1e308 were printed, a histogram
    # of 30,000 entries took the report 52 s
    "length histogram past max_seq_length": (
        lambda d: d.update(statistics={"length_histogram": [0] * 33 + [0] * 30_000}),
        "statistics.length_histogram: 30,033 entries, but the settings allow 33",
    ),
    "predictions histogram": (
        lambda d: d.update(statistics={"predictions_histogram": [1] * 7}),
        "statistics.predictions_histogram: 7 entries, but the settings allow 6",
    ),
    "NaN fraction": (
        lambda d: d.update(statistics={"mask_fractions": {"mask": float("nan")}}),
        "statistics.mask_fractions.mask: nan is not a finite number",
    ),
    "1e308 fraction": (
        lambda d: d.update(statistics={"next_sentence": {"is_next": 1e308}}),
        "statistics.next_sentence.is_next: 1e.308 is outside 0.0..1.0",
    ),
    "mean length past max_seq_length": (
        lambda d: d.update(statistics={"length": {"mean": 33.5}}),
        "statistics.length.mean: 33.5 is outside 0.0..32.0",
    ),
    "a negative bin": (
        lambda d: d.update(statistics={"length_histogram": [1, -1]}),
        r"statistics.length_histogram\[1\]: -1 is outside",
    ),
    "an unknown figure infinite": (
        lambda d: d.update(statistics={"extra": {"x": [float("inf")]}}),
        r"statistics.extra.x\[0\]: inf is not a finite number",
    ),
}


@pytest.mark.parametrize("case", FIELDS)
def test_every_field_is_checked_with_one_line_naming_it(dataset, case):
    change, message = FIELDS[case]
    edit(dataset, change)
    with pytest.raises(SchemaError, match=message) as e:
        trainer_reads(dataset)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{dataset}/manifest.json: ")
    with pytest.raises(SchemaError, match=message):
        inspect_verifies(dataset)


COUNTS_CASES = {
    "count edited to 0": (lambda d: _set_count(d, 0, 0), SchemaError, "formats hold different numbers of rows"),
    "count and totals edited to 0": (
        lambda d: (_set_count(d, 0, 0), _set_count(d, 2, 0), d["totals"].update(instances=20)),
        ShardError,
        "holds 30 instances, the manifest says 0",
    ),
    "a shard listed twice": (lambda d: d["shards"].append(dict(d["shards"][0])), SchemaError, "listed twice"),
    "a copy listed under another name": (
        lambda d: d["shards"].append({**d["shards"][0], "path": "copy.arrow"}),
        SchemaError,
        "listed twice",
    ),
    "totals": (lambda d: d["totals"].update(instances=51), SchemaError, "totals.instances: 51, but the shards' counts"),
    "vocab size": (lambda d: d["vocab"].update(size=1099), VocabMismatchError, "the manifest says vocab.size 1099"),
}


def _set_count(d: dict, i: int, count: int) -> None:
    d["shards"][i]["count"] = count


@pytest.mark.parametrize("case", COUNTS_CASES)
def test_counts_are_what_the_shards_hold(dataset, case):
    change, error, message = COUNTS_CASES[case]
    edit(dataset, change)
    with pytest.raises(error, match=message):
        trainer_reads(dataset)
    try:
        problems = inspect_verifies(dataset)
    except SchemaError as e:
        problems = [str(e)]
    assert problems, "bertprep inspect --verify found nothing wrong"


def _with_row(inst: Instances, i: int, *, ids=None, segment_a=None, nsp=None) -> Instances:
    """``inst`` with row ``i`` replaced (its masks dropped): what a tamperer who knows the format writes, sizes
    and hashes in the manifest agreeing with the files, only the rows wrong."""
    row = inst.row(i)
    ids = np.asarray(row["input_ids"] if ids is None else ids, inst.input_ids.dtype)
    one = Instances(
        np.asarray([len(ids)], np.int64),
        ids,
        np.asarray([row["segment_a_length"] if segment_a is None else segment_a], np.int16),
        np.zeros(1, np.int64),
        np.zeros(0, np.uint16),
        np.zeros(0, inst.masked_ids.dtype),
        np.asarray([row["next_sentence_label"] if nsp is None else nsp], np.int8),
        inst.instance_id[i : i + 1],
    )
    parts = [inst.slice(0, i), one, inst.slice(i + 1, len(inst))]
    return Instances(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Instances)))


ROWS = {
    "NSP label 7": (dict(nsp=7), "next_sentence_label 7, not 0 or 1"),
    "segment past the row": (dict(segment_a=200), "segment_a_length 200 outside 2.."),
    "segment of 0": (dict(segment_a=0), "segment_a_length 0 outside 2.."),
    "row longer than max_seq_length": (dict(ids=[101] + [300] * 38 + [102]), "40 tokens, more than the manifest's"),
    "empty row": (dict(ids=[], segment_a=0), "has 0 tokens"),
}


@pytest.mark.parametrize("case", ROWS)
def test_shard_rows_are_range_checked(tmp_path, vocab, case):
    change, message = ROWS[case]
    root = tmp_path / "ds"
    inst = _with_row(make_instances(sum(COUNTS), seed=3, vocab=vocab, max_len=32), 3, **change)
    write_dataset(root, inst, COUNTS, vocab=vocab, parameters={"max_seq_length": 32, "seed": 0})
    with pytest.raises(ShardError, match=message):
        trainer_reads(root)
    assert any(message in p for p in inspect_verifies(root))


REPORT_ROWS = {
    **ROWS,
    "an id past the vocabulary": (dict(ids=[101] + [5000] * 10 + [102], segment_a=6), "an id 5000 outside the"),
}


@pytest.mark.parametrize("case", REPORT_ROWS)
def test_the_report_checks_rows_and_ids_as_verify_does(tmp_path, vocab, case):
    """``bertprep report`` counted tokens by id: an id past the vocabulary was dropped without a word (and one
    of 2**31 - 1 sized the count array by it), a bad row was plotted (issue 53); now the rows it reads pass
    --verify's checks, or one line names the shard."""
    from bertstream.pipelines.report.data import count_tokens
    from bertstream.pipelines.report.inspection import DatasetError

    change, message = REPORT_ROWS[case]
    root = tmp_path / "ds"
    inst = _with_row(make_instances(sum(COUNTS), seed=3, vocab=vocab, max_len=32), 3, **change)
    write_dataset(root, inst, COUNTS, vocab=vocab, parameters={"max_seq_length": 32, "seed": 0})
    m = Manifest.from_json((root / MANIFEST_NAME).read_text(), source=str(root / MANIFEST_NAME))
    with pytest.raises(DatasetError, match=message) as e:
        count_tokens(str(root), m, len(vocab))
    assert str(e.value).startswith("shard ") and "\n" not in str(e.value)
    assert any(message in p for p in inspect_verifies(root))
