"""Task data: reading through the manifest with checks, batch plans per epoch and rank, dynamic padding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertstream.schemas import tasks as T
from bertstream.trainer.finetune.data import (
    EpochBatches,
    TaskDataError,
    TaskDataset,
    collate,
    load_task_data,
)
from bertstream.trainer.finetune.inputs import check_pair
from bertstream.trainer.finetune.tasks import get_task


def test_training_plan_is_seeded_per_epoch_and_equal_across_ranks():
    n, world = 103, 4
    plans = [EpochBatches(n, 8, shuffle=True, seed=3, world_size=world, rank=r) for r in range(world)]
    for epoch in (0, 1):
        for p in plans:
            p.set_epoch(epoch)
        per_rank = [p.rank_indices() for p in plans]
        assert len({len(x) for x in per_rank}) == 1 == len({len(p) for p in plans})  # same steps on every rank
        assert len(plans[0]) == 4  # ceil(ceil(103 / 4) / 8)
        allx = np.concatenate(per_rank)
        assert set(allx.tolist()) == set(range(n)) and len(allx) == 104  # one row repeated to fill the last slot
        assert sum(len(b) for b in plans[1]) == 26
    again = EpochBatches(n, 8, shuffle=True, seed=3, world_size=world, rank=1)
    again.set_epoch(1)
    assert np.array_equal(again.rank_indices(), plans[1].rank_indices())
    again.set_epoch(0)
    assert not np.array_equal(again.rank_indices(), plans[1].rank_indices())  # a new order every epoch
    other_seed = EpochBatches(n, 8, shuffle=True, seed=4, world_size=world, rank=1)
    other_seed.set_epoch(1)
    assert not np.array_equal(other_seed.rank_indices(), plans[1].rank_indices())
    state = again.state_dict()
    fresh = EpochBatches(n, 8, shuffle=True, seed=3, world_size=world, rank=1)
    fresh.load_state_dict(state)
    assert [list(b) for b in fresh] == [list(b) for b in again]
    with pytest.raises(ValueError, match="another seed"):
        other_seed.load_state_dict(state)


def test_evaluation_plan_covers_every_row_once_in_order():
    plans = [EpochBatches(10, 3, shuffle=False, world_size=3, rank=r) for r in range(3)]
    rows = [i for p in plans for b in p for i in b]
    assert sorted(rows) == list(range(10)) and len(rows) == 10
    assert [list(b) for b in plans[0]] == [[0, 3, 6], [9]] and len(plans[0]) == 2 and len(plans[2]) == 1


def test_collate_pads_to_a_multiple_of_8_with_segments_and_ignored_labels():
    rows = [
        {"index": 4, "input_ids": np.array([2, 10, 11, 3, 12, 3]), "segment_a_length": 4, "label": 1},
        {"index": 9, "input_ids": np.array([2, 13, 3]), "segment_a_length": 3, "label": 0},
    ]
    b = collate(rows, task=get_task(T.CLASSIFICATION), pad_id=0)
    assert b["input_ids"].tolist() == [[2, 10, 11, 3, 12, 3, 0, 0], [2, 13, 3, 0, 0, 0, 0, 0]]
    assert b["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1, 0, 0], [0] * 8]
    assert b["attention_mask"].sum(1).tolist() == [6, 3]
    assert b["labels"].tolist() == [1, 0] and b["index"].tolist() == [4, 9]
    ner = [{"index": 0, "input_ids": np.arange(9), "labels": np.array([-100, 1, -100, 2, 0, 0, 0, 0, -100])}]
    b = collate(ner, task=get_task(T.NER), pad_id=0)
    assert b["input_ids"].shape == (1, 16) and b["labels"][0, 9:].eq(-100).all()
    unlabeled = [{"index": 0, "input_ids": np.array([2, 3]), "segment_a_length": 2}]  # GLUE test rows
    assert "labels" not in collate(unlabeled, task=get_task(T.CLASSIFICATION), pad_id=0)


def test_real_sst2_split_reads_whole_and_checks_its_pair(sst2):
    train = load_task_data(str(sst2["train"]), get_task(T.CLASSIFICATION), role="--train-data")
    dev = load_task_data(str(sst2["dev"]), get_task(T.CLASSIFICATION), role="--eval-data")
    test = load_task_data(str(sst2["test"]), get_task(T.CLASSIFICATION), role="--eval-data")
    assert (len(train), len(dev), len(test)) == (320, 200, 60)
    assert train.labels == dev.labels == ("0", "1") and train.glue == "sst2"
    assert test.columns[T.LABEL] is None and not test.labeled
    check_pair(train, dev)
    check_pair(train, test)  # unlabeled evaluation data is fine (predictions only)
    with pytest.raises(TaskDataError, match="unlabeled: training needs labels"):
        check_pair(test, dev)
    row = TaskDataset(dev, get_task(T.CLASSIFICATION))[5]
    assert row["input_ids"][0] == dev.vocab.id("[CLS]") and row["input_ids"][-1] == dev.vocab.id("[SEP]")
    with pytest.raises(TaskDataError, match="holds a 'classification' task but --task is 'regression'"):
        load_task_data(str(sst2["dev"]), get_task(T.REGRESSION), role="--eval-data")


def test_corrupt_shard_and_missing_manifest_are_named(sst2, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(sst2["dev"], broken)
    shard = next(broken.glob("*.arrow"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(TaskDataError, match=f"shard {broken}/{shard.name} does not match the manifest"):
        load_task_data(str(broken), get_task(T.CLASSIFICATION))
    with pytest.raises(TaskDataError, match="no manifest.json"):
        load_task_data(str(tmp_path), get_task(T.CLASSIFICATION), role="--train-data")


def test_label_lists_must_agree(sst2, task_vocab, tmp_path):
    from tests.jobs import run_classification

    src = next(sst2["dev"].parent.glob("dev.tsv"))
    swapped = tmp_path / "swapped"
    run_classification(
        inputs=[str(src)],
        vocab=str(task_vocab),
        output=str(swapped),
        glue="sst2",
        split="dev",
        labels=("1", "0"),
        max_seq_length=64,
    )
    train = load_task_data(str(sst2["train"]), get_task(T.CLASSIFICATION))
    dev = load_task_data(str(swapped), get_task(T.CLASSIFICATION))
    with pytest.raises(TaskDataError, match=r"different label lists: \['0', '1'\] vs \['1', '0'\].*--label-set-from"):
        check_pair(train, dev)


def test_ner_windows_select_each_word_once(conll):
    data = load_task_data(str(conll["valid"]), get_task(T.NER))
    c = data.columns
    m = json.loads((conll["valid"] / "manifest.json").read_text())
    assert len(data) > m["totals"]["sentences"]  # short windows: some sentences are split
    per_sentence: dict[int, list[int]] = {}
    for i in range(len(data)):
        first = (c[T.LABELS][i] != T.IGNORE_INDEX) & (c[T.OWNED][i] == 1)
        per_sentence.setdefault(int(c[T.ROW_ID][i]) >> 16, []).extend(c[T.WORD_IDS][i][first].tolist())
    assert len(per_sentence) == m["totals"]["sentences"]
    for words in per_sentence.values():
        assert sorted(words) == list(range(len(words)))
    assert torch.is_tensor(collate([TaskDataset(data, get_task(T.NER))[0]], task=get_task(T.NER), pad_id=0)["labels"])


def _tampered_rows(src: Path, dst: Path, column: str, row: int, value) -> Path:
    """``src`` copied with one cell of its shard rewritten, the manifest's size and sha256 updated to match (a
    tamperer who knows the format)."""
    import hashlib

    import pyarrow as pa

    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    entry = m["shards"][0]
    table = pa.ipc.open_file(pa.memory_map(str(dst / entry["path"]))).read_all()
    values = table.column(column).to_pylist()
    values[row] = value
    field = table.schema.field(column)
    table = table.set_column(table.schema.get_field_index(column), field, pa.array(values, field.type))
    with pa.ipc.new_file(str(dst / entry["path"]), table.schema) as w:
        w.write_table(table)
    data = (dst / entry["path"]).read_bytes()
    entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("segment_a_length", 200, "row 3 has a segment_a_length outside 2..its length"),
        ("input_ids", [2, 60000, 3], "row 3 holds an id outside the vocabulary's 0..3999"),
        ("input_ids", [2] + [7] * 100 + [3], "row 3 is longer than the manifest's max_seq_length 64"),
        ("input_ids", [], "row 3 has fewer than 2 tokens"),
    ],
)
def test_task_rows_are_range_checked(sst2, tmp_path, column, value, message):
    bad = _tampered_rows(sst2["dev"], tmp_path / "bad", column, 3, value)
    with pytest.raises(TaskDataError, match=f"^--eval-data {bad}: {message}"):
        load_task_data(str(bad), get_task(T.CLASSIFICATION), role="--eval-data")


def test_a_dataset_whose_manifest_records_no_layout_still_loads_and_a_wrong_layout_is_refused(sst2, tmp_path):
    """Datasets written before the manifest recorded ``task.layout`` (the four kinds of then) read as before:
    their kind names the layout. One that records another layout than its task reads is refused by name."""
    written = json.loads((sst2["dev"] / "manifest.json").read_text())
    assert written["task"]["layout"] == "sequence_class"  # what bertprep task records now
    before = tmp_path / "before"
    shutil.copytree(sst2["dev"], before)
    manifest = before / "manifest.json"
    del written["task"]["layout"]
    manifest.write_text(json.dumps(written))
    old = load_task_data(str(before), get_task(T.CLASSIFICATION))
    new = load_task_data(str(sst2["dev"]), get_task(T.CLASSIFICATION))
    assert old.columns.keys() == new.columns.keys() and (old.columns[T.LABEL] == new.columns[T.LABEL]).all()
    manifest.write_text(json.dumps({**written, "task": {**written["task"], "layout": "token_labels"}}))
    with pytest.raises(TaskDataError, match="its rows are token_labels rows; the classification task reads"):
        load_task_data(str(before), get_task(T.CLASSIFICATION))
    manifest.write_text(json.dumps({**written, "kind": "multiple_choice"}))  # a kind added since must record it
    with pytest.raises(TaskDataError, match="not a fine-tuning task's"):
        load_task_data(str(before), get_task(T.CLASSIFICATION))
