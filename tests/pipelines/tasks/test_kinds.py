"""The table of task kinds: the ``bertprep task`` commands are its kinds, each with its job's flags; a job is run
by its own kind; a kind's settings are checked where they are declared, when the job is built."""

from __future__ import annotations

import pytest

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.pipelines.cli import main
from bertstream.pipelines.tasks.classification import ClassificationJob
from bertstream.pipelines.tasks.kinds import KINDS, kind_of
from bertstream.pipelines.tasks.ner import NerJob
from bertstream.pipelines.tasks.pipeline import POLICY
from bertstream.pipelines.tasks.squad import SquadJob


def test_the_task_commands_are_the_table_of_kinds_with_their_jobs_flags():
    group = main.commands["task"]
    assert list(group.commands) == [k.name for k in KINDS] == ["classification", "ner", "squad"]
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
