"""The task jobs by keyword, as the tests write them (``run_classification(inputs=[...], vocab=..., output=...)``):
each builds the job from its flags' names (``bertstream.cli.options.build``) and runs it. The product takes a job
only; this convenience is the tests'."""

from __future__ import annotations

from typing import Any

from bertstream.cli import options
from bertstream.pipelines.common.dataset_run import RunResult
from bertstream.pipelines.tasks import pipeline as P
from bertstream.pipelines.tasks.config import ClassificationJob, NerJob, SquadJob


def run_classification(**values: Any) -> RunResult:
    return P.run_classification(options.build(ClassificationJob, **values))


def run_ner(**values: Any) -> RunResult:
    return P.run_ner(options.build(NerJob, **values))


def run_squad(**values: Any) -> RunResult:
    return P.run_squad(options.build(SquadJob, **values))
