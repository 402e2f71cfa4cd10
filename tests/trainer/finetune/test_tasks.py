"""The table of fine-tuning kinds: one ``Task`` per schema kind, each owning its rows' sequences and checks, its
batches (padded with the data's pad id) and its Hugging Face class, which an export's folder is read back as."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from bertstream.schemas import tasks as T
from bertstream.trainer.finetune.data import TaskDataError, load_task_data, pad_sequences
from bertstream.trainer.finetune.tasks import HF_HEADS, TASKS, Classification, get_task
from bertstream.trainer.hf import tasks as HT
from tests.conftest import shared_path
from tests.trainer.finetune.conftest import head_lines
from tests.trainer.finetune.hf_fixtures import CONFIG


def test_every_schema_kind_has_its_task_and_an_unknown_kind_is_refused_by_name():
    assert set(TASKS) >= set(T.EARLIER_LAYOUTS) and all(TASKS[k].kind == k for k in TASKS)
    assert all(TASKS[k].layout is x for k, x in T.EARLIER_LAYOUTS.items())  # old datasets still read
    assert all(t.layout in T.LAYOUTS.values() for t in TASKS.values())
    with pytest.raises(ValueError, match="'no-such-kind'"):
        get_task("no-such-kind")


@pytest.mark.parametrize("kind", list(TASKS))
def test_each_kinds_exported_class_is_read_back_as_that_kind(kind):
    """The export writes the class and problem type of the kind's ``hf``; ``--init`` of that folder finds the
    same kind among all kinds' heads (no table of classes beside the tasks)."""
    head = get_task(kind).hf
    labels = ["a", "b", "c"]
    config = HT.task_config_dict(CONFIG, head, labels)
    assert HT.task_class(config["architectures"], HF_HEADS, config.get("problem_type")) is head
    shapes = HT.head_shapes(head, CONFIG, labels)
    model = get_task(kind).build_model(CONFIG, len(labels))
    ours = {k: v.shape for k, v in model.state_dict().items() if not k.startswith("bert.")}
    assert ours == shapes  # what the export expects is what the task builds


def test_a_batch_is_padded_with_the_datas_pad_id():
    rows = [
        {"index": 0, "input_ids": np.array([2, 10, 3]), "segment_a_length": 3, "label": 1},
        {"index": 1, "input_ids": np.array([2, 3]), "segment_a_length": 2, "label": 0},
    ]
    batch = get_task(T.CLASSIFICATION).collate(rows, pad_id=7, multiple=4)
    assert batch["input_ids"].tolist() == [[2, 10, 3, 7], [2, 3, 7, 7]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]


class _Halves(Classification):
    """A kind whose row holds two sequences, ``[CLS] A [SEP]`` and ``B [SEP]`` (as a multiple-choice row holds
    its candidates): what the reader checks and the positions a model needs are each sequence's, not the row's."""

    def sequences(self, data):
        seg = data.columns[T.SEGMENT_A_LENGTH].astype(np.int64)
        rows = data.columns[T.INPUT_IDS].lengths()
        pair = seg < rows
        lengths = np.concatenate([seg, (rows - seg)[pair]])
        return lengths, np.concatenate([np.arange(len(rows)), np.flatnonzero(pair)])

    def collate(self, rows: Sequence[Mapping[str, Any]], *, pad_id: int, multiple: int = 8) -> dict[str, torch.Tensor]:
        halves = [part for r in rows for part in np.split(r["input_ids"], [r["segment_a_length"]])]
        batch = pad_sequences(halves, None, pad_id=pad_id, multiple=multiple)  # [2B, T]
        return {k: v.view(len(rows), 2, -1) for k, v in batch.items()}  # [B, 2, T]


def test_a_kind_whose_rows_hold_several_sequences_is_read_checked_and_batched_by_its_task(sst2, task_vocab, tmp_path):
    from tests.jobs import run_classification

    one = get_task(T.CLASSIFICATION)
    single = load_task_data(str(sst2["dev"]), one)  # single sentences: one sequence each
    assert _Halves().max_length(single) == one.max_length(single)
    tsv = head_lines(shared_path("tasks", "mrpc", "dev.tsv"), tmp_path / "mrpc_dev.tsv", 41)  # sentence pairs
    mrpc = tmp_path / "mrpc_dev"
    run_classification(
        inputs=[str(tsv)], vocab=str(task_vocab), output=str(mrpc), glue="mrpc", split="dev", max_seq_length=64
    )
    pairs = load_task_data(str(mrpc), _Halves())
    rows = pairs.columns[T.INPUT_IDS].lengths()
    assert _Halves().max_length(pairs) < one.max_length(pairs) == rows.max()
    assert _Halves().sequences(pairs)[0].sum() == rows.sum()
    batch = _Halves().collate([{"input_ids": np.array([2, 5, 3, 6, 7, 3]), "segment_a_length": 3}], pad_id=0)
    assert batch["input_ids"].tolist() == [[[2, 5, 3, 0, 0, 0, 0, 0], [6, 7, 3, 0, 0, 0, 0, 0]]]

    class Short(_Halves):  # the reader refuses a sequence of its task's that is too short, naming its row
        def sequences(self, data):
            lengths, owner = super().sequences(data)
            return np.where(owner == 3, 1, lengths), owner

    with pytest.raises(TaskDataError, match=r"row 3 has fewer than 2 tokens"):
        load_task_data(str(mrpc), Short())
