"""Pipeline construction shared by every bertstream pipeline: options pass-through and the default runner.

Without ``--runner`` the pipeline runs on Beam's in-process ``FnApiRunner`` (never the DirectRunner, which
first tries to download the Prism binary). ``--direct_num_workers=N`` (N > 1) runs N worker processes;
``--direct_running_mode=multi_threading`` is refused because it loses elements in Beam 2.77.
"""

from __future__ import annotations

import importlib
import os
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions


class UsageError(ValueError):
    """A bad argument or environment detected before the pipeline starts; ``param`` names the flag."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas (Beam's gRPC threads each get one, ~60 MB of resident memory
    per process for nothing here). Only affects arenas created from now on; a no-op off glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def import_runner(beam_args: list[str]) -> None:
    """Import the module of a ``--runner`` given by its full name (``apache_beam.runners.dask.dask_runner.
    DaskRunner``): runners outside Beam's core define their options there (``--dask_client_address``), and
    those are unknown until it is imported."""
    runner = PipelineOptions(beam_args).view_as(StandardOptions).runner
    if runner and "." in runner:
        module = runner.rpartition(".")[0]
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise UsageError("runner", f"--runner={runner}: cannot import {module} ({e})") from None


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    import_runner(beam_args)
    options = PipelineOptions(beam_args)
    known = options.get_all_options()
    unknown = [a for a in options.get_all_options(retain_unknown_options=True) if a not in known]
    if unknown:
        raise UsageError("beam option", f"unknown option(s): {', '.join('--' + u for u in unknown)}")
    if options.view_as(DirectOptions).direct_running_mode == "multi_threading":
        raise UsageError(
            "direct_running_mode",
            "--direct_running_mode=multi_threading loses elements in Beam 2.77; "
            "use --direct_num_workers=N (worker processes)",
        )
    # Inputs are listed, the vocabulary read and the output folder checked in this process before the
    # pipeline starts: they need the same filesystem options (--s3_endpoint_url, credentials) as its workers.
    from apache_beam.io.filesystems import FileSystems

    FileSystems.set_options(options)
    return options


def local_threads_per_worker(options: PipelineOptions) -> int:
    """Cores each worker may use: the machine's cores shared by the embedded runner's workers, else 1."""
    if options.view_as(StandardOptions).runner is not None:
        return 1  # distributed runners already run a worker per core
    workers = options.view_as(DirectOptions).direct_num_workers or 1
    return max(1, (os.cpu_count() or 1) // workers)


def runner_name(options: PipelineOptions) -> str:
    return options.view_as(StandardOptions).runner or "FnApiRunner"


def make_pipeline(options: PipelineOptions) -> beam.Pipeline:
    if options.view_as(StandardOptions).runner is not None:
        return beam.Pipeline(options=options)
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms import environments

    direct = options.view_as(DirectOptions)
    if (direct.direct_num_workers or 1) > 1 or direct.direct_running_mode == "multi_processing":
        # Worker processes, started through our entry point so that they stay quiet.
        env = environments.SubprocessSDKEnvironment.from_command_string(
            f"MALLOC_ARENA_MAX=2 {sys.executable} -m pipelines.beam_worker"
        )
        direct.direct_running_mode = "in_memory"  # else FnApiRunner replaces our environment with its own
        return beam.Pipeline(runner=FnApiRunner(default_environment=env), options=options)
    return beam.Pipeline(runner=FnApiRunner(), options=options)
