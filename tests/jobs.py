"""The task jobs by keyword, as the tests write them (``run_classification(inputs=[...], vocab=..., output=...)``):
each builds the job from its flags' names (``bertstream.cli.options.build``) and runs it. The product takes a job
only; this convenience is the tests'."""

from __future__ import annotations

from typing import Any

from bertstream.cli import options
from bertstream.pipelines.common.dataset import RunResult
from bertstream.pipelines.tasks.classification import ClassificationJob
from bertstream.pipelines.tasks.ner import NerJob
from bertstream.pipelines.tasks.pipeline import run_task
from bertstream.pipelines.tasks.squad import SquadJob


def run_classification(**values: Any) -> RunResult:
    return run_task(options.build(ClassificationJob, **values))


def run_ner(**values: Any) -> RunResult:
    return run_task(options.build(NerJob, **values))


def run_squad(**values: Any) -> RunResult:
    return run_task(options.build(SquadJob, **values))
