"""The table of task kinds: the ``bertprep task`` commands are its kinds, each with its job's flags; a job is run
by its own kind; a kind's settings are checked where they are declared, when the job is built."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pyarrow as pa
import pytest

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.pipelines.cli import main
from bertstream.pipelines.tasks import kind as K
from bertstream.pipelines.tasks.classification import ClassificationJob
from bertstream.pipelines.tasks.finalize import merge_stats
from bertstream.pipelines.tasks.kinds import KINDS, kind_of
from bertstream.pipelines.tasks.ner import NerJob
from bertstream.pipelines.tasks.pipeline import POLICY
from bertstream.pipelines.tasks.squad import SquadJob
from bertstream.pipelines.tasks.write import shard_stats
from bertstream.schemas import tasks as T

TASKS_ROOM = Path(K.__file__).resolve().parent


def test_the_task_commands_are_the_table_of_kinds_with_their_jobs_flags():
    group = main.commands["task"]
    assert list(group.commands) == [k.name for k in KINDS]
    # each command writes rows of kinds it names, each of a layout of the contract
    assert all(T.is_kind_name(k) and x in T.LAYOUTS.values() for kind in KINDS for k, x in kind.layouts.items())
    for kind in KINDS:  # its parser (a room's parse.py, where it has one) counts records in the kind's unit
        if importlib.util.find_spec(f"{type(kind).__module__}.parse"):
            assert importlib.import_module(f"{type(kind).__module__}.parse").UNIT == kind.unit
    for kind in KINDS:
        flags = {opt for p in group.commands[kind.name].params for opt in (*p.opts, *p.secondary_opts)}
        declared = {
            part for leaf in options.leaves(kind.job) if leaf.meta.get("cli", True) for part in leaf.flag.split("/")
        }
        assert flags - {"--help"} == declared, kind.name


def test_a_job_is_run_by_its_own_kind():
    job = options.build(NerJob, inputs=["a"], vocab="v", output="o")
    assert kind_of(job).name == "ner"
    with pytest.raises(TypeError, match="not a task job"):
        kind_of(job.io)


@pytest.mark.parametrize(
    ("cls", "values", "param"),
    [
        (NerJob, {"max_seq_length": 32, "window_overlap": 16}, "window_overlap"),
        (SquadJob, {"doc_stride": 1000}, "doc_stride"),
        (SquadJob, {"max_seq_length": 64, "max_query_length": 64}, "max_query_length"),
        (SquadJob, {"max_seq_length": 4}, "max_seq_length"),
        # Contradictions: each run dropped one of the flags silently (--label-column; --regression).
        (ClassificationJob, {"no_labels": True, "label_column": "label"}, "no_labels"),
        (ClassificationJob, {"glue": "sst2", "regression": True}, "regression"),
    ],
)
def test_a_kinds_settings_are_checked_when_its_job_is_built(cls, values, param):
    with pytest.raises(UsageError) as e:
        options.build(cls, inputs=["a"], vocab="v", output="o", **values)
    assert e.value.param == param


def test_the_files_a_kind_writes_are_a_task_datasets_outputs():
    for kind in KINDS:
        for name in kind.files:
            assert POLICY.is_output(name) and POLICY.is_output(name + ".tmp")
    assert not POLICY.is_output("notes.txt")


def _rows(labels: list[int]) -> pa.Table:
    return pa.table({T.INPUT_IDS: [[2, 5, 3]] * len(labels), T.LABEL: pa.array(labels, pa.int16())})


def test_the_shared_writer_and_finaliser_read_a_label_as_its_kind_declares_it():
    """They guessed from the column's type: any integer ``label`` was a class index, so a kind whose integer label
    is no index into label names (a choice among a row's candidates) failed the finaliser with an IndexError."""
    rows = _rows([1, 0, 1, 1])
    assert shard_stats(rows, K.CLASS_INDEX)["label_counts"] == {"0": 1, "1": 3}
    assert K.CLASS_INDEX.shown({"0": 1, "1": 3}, ["neg", "pos"]) == {"neg": 1, "pos": 3}
    assert shard_stats(rows, K.VALUE)["label_counts"] == {}  # a value is not counted, whatever its column type
    choice = K.LabelMeaning("the right candidate's index", T.LABEL, counted=True)  # a kind of tomorrow's
    counts = shard_stats(rows, choice)["label_counts"]
    assert choice.shown(counts, []) == {"0": 1, "1": 3}  # no label names: shown by index, no IndexError
    with pytest.raises(ValueError, match="needs its column"):
        K.LabelMeaning("a span", None, counted=True)


def test_a_row_of_several_sequences_is_measured_by_its_sequences():
    """The manifest's max_length and mean_length are a sequence's (what the model's positions must hold), so a kind
    whose row holds its candidates one after another declares the column of their lengths (``Plan.sequences``)."""
    rows = pa.table({T.INPUT_IDS: [[2, 5, 3, 2, 6, 3], [2, 7, 3, 2, 8, 9, 3]], "lengths": [[3, 3], [3, 4]]})
    one = shard_stats(rows, K.VALUE)
    assert (one["rows"], one["sequences"], one["max_length"]) == (2, 2, 7)
    each = shard_stats(rows, K.VALUE, "lengths")
    assert (each["rows"], each["sequences"], each["tokens"], each["max_length"]) == (2, 4, 13, 4)
    merged = merge_stats([{"stats": each}, {"stats": shard_stats(None, K.VALUE, "lengths")}])
    assert merged == {"rows": 2, "tokens": 13, "mean_length": 3.25, "max_length": 4}


def test_the_stages_every_kind_shares_name_no_kind():
    """What a kind decides is asked of its ``TaskKind`` and its plan (``Plan.label``): a shared stage that names a
    kind is where the next kind would have to be added by hand."""
    names = [n for n, v in vars(T).items() if n.isupper() and isinstance(v, str) and v in T.EARLIER_LAYOUTS]
    kind_names = re.compile(r"\bT\.(" + "|".join(names) + r")\b|[\"'](" + "|".join(T.EARLIER_LAYOUTS) + r")[\"']")
    shared = sorted(TASKS_ROOM.glob("*.py"))
    assert len(shared) > 5 and names
    assert {p.name: kind_names.findall(p.read_text(encoding="utf-8")) for p in shared} == {p.name: [] for p in shared}
