"""The dataset run, written once for every job that writes a dataset (pretraining, tasks): :func:`run_dataset`
holds the ``--output`` folder for the run (:mod:`bertstream.pipelines.common.output_dir`: overlap, lock, work
folder, the earlier dataset set aside, bounded clean-up), writes the manifest's run entry, builds and runs the
job's Beam graph, and reads the published manifest back. A job gives its own parts (:class:`DatasetRun`): which
files are its, what it reads, its manifest header and its stages; the steps and their order are here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from bertstream.cli.errors import raise_if_swallowed
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.dataset import DatasetHeader, RunResult, read_result, unpublish
from bertstream.pipelines.common.output_dir import Claim, OutputPolicy, claim_output
from bertstream.pipelines.common.redact import redact_options
from bertstream.pipelines.runners.heap import freeze_imported_objects
from bertstream.pipelines.runners.runner import local_worker_processes, make_pipeline, run_pipeline, runner_name


def run_entry(options: Any, beam_args: list[str], started: float) -> dict[str, Any]:
    """The manifest's ``run``: the runner, its options with secrets redacted, the start time."""
    entry = {"runner": runner_name(options), "options": redact_options(list(beam_args)), "started_at": started}
    workers = local_worker_processes(options)
    return {**entry, "worker_processes": workers} if workers else entry


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetRun:
    """One job's parts of a dataset run. ``header(claim, run)`` makes the manifest's header from the claimed
    folder and the ``run`` entry (runner, options, start, run id); ``build(p, claim, header)`` adds the job's
    stages to the pipeline; ``check(result)``, after the manifest is published, raises when the dataset is
    unusable (the earlier dataset then comes back); ``monitor()`` draws progress while the pipeline runs."""

    policy: OutputPolicy
    output: str
    overwrite: bool
    reads: dict[str, list[str]]  # flag -> paths the run reads: none may lie inside --output
    options: Any  # the runner's PipelineOptions
    beam_args: tuple[str, ...]
    input_bytes: int
    header: Callable[[Claim, dict[str, Any]], DatasetHeader]
    build: Callable[[beam.Pipeline, Claim, DatasetHeader], None]
    announce: Callable[[Claim], str]
    monitor: Callable[[], AbstractContextManager[Any]] | None = None
    check: Callable[[RunResult], None] | None = None


def run_dataset(run: DatasetRun) -> RunResult:
    """Hold the output folder, write the dataset with the job's stages, read its manifest back."""
    freeze_imported_objects()  # Beam's import, out of the collector's scans (pipelines/runners/heap.py)
    with claim_output(run.output, run.overwrite, run.policy, run.reads) as claim:
        started = time.time()
        entry = {**run_entry(run.options, list(run.beam_args), started), "run_id": claim.run_id}
        entry["input_bytes"] = run.input_bytes
        header = run.header(claim, entry)
        C.progress(run.announce(claim))
        p = make_pipeline(run.options, claim.run_id)
        run.build(p, claim, header)
        with run.monitor() if run.monitor is not None else nullcontext():
            run_pipeline(p)
        result = read_result(claim.output_dir, started, run.input_bytes)
        try:
            # A Ctrl-C or SIGTERM whose exception a finalizer or a library swallowed while the pipeline ran: the
            # run ends as interrupted, as it would have had the exception come through (it went on to exit 0).
            raise_if_swallowed()
            if run.check is not None:
                run.check(result)
        except BaseException:
            unpublish(claim.output_dir, result.manifest)  # then the earlier dataset, if any, comes back
            raise
    return result
