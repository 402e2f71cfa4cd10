"""``--runner DaskRunner``: Beam's DaskRunner with what stops it running bertstream fixed.

Beam 2.77's DaskRunner translates a pipeline into ``dask.bag`` operations; ``scripts/tools/dask_runner_repro.py``
shows the defects that keep it from running ours, and names Beam's lines at fault. This module keeps Beam's
runner (its options, its overrides of Create/GroupByKey/Flatten/Reshuffle) and replaces the translation:

- **Bundles** (:mod:`bertstream.pipelines.runners.dask_graph`): what a DoFn emits in ``finish_bundle`` is kept, and every
  output keeps its tag, so each consumer of a multi-output ParDo gets its own output only. A bundle streams:
  its outputs leave as they are made, so a chain of ParDos fused into one Dask task holds one element at a
  time, not a partition's worth at each step (Beam's builds a list per step).
- **Side inputs** are computed once, as one Dask value every consuming partition depends on (Beam's
  recomputes a side input's whole upstream inside every partition that reads it; Beam 2.78's
  ``--dask_lazy_side_inputs`` is accepted and changes nothing here).
- **Every sink runs**: the graph computed is the union of every transform nobody consumes (Beam's computes
  only the last transform applied), and no sink's elements travel to the launcher.
- **Parallelism**: ``Reshuffle`` spreads elements over ``--dask_npartitions`` partitions (default: 4 per
  worker thread), as it does on other runners (Beam's is a no-op, so a pipeline that starts from a few
  ``Create``d files runs in one partition on one worker); ``Create`` makes one partition per element up to
  that number.
- **The run ends cleanly**: the Dask client is closed when the run ends; on failure the job's tasks are
  cancelled and the launcher waits (bounded) until none of them still runs, so no task of a failed run
  writes into ``--output`` after the run has cleaned up. Beam metrics are not collected on Dask
  (``metrics()`` answers empty instead of raising); bertstream's counters travel as data anyway.

The translation reads Beam internals (``_OutputHandler``, ``DoFnInvoker``, the Dask overrides), so it is
pinned to the Beam versions it is tested on (``TESTED_BEAM``, the same range pyproject declares: a test holds the two
together): another Beam is refused in one line.
``--runner DaskRunner`` and Beam's full name (``apache_beam.runners.dask.dask_runner.DaskRunner``) both
select this runner in bertprep (``bertstream.pipelines.runners.runner.RUNNER_ALIASES``): Beam's own loses data on bertstream's
pipeline (the run fails rather than publish it), so no bertprep user wants it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricResults
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.runner import PipelineResult, PipelineState

from bertstream.cli import reach
from bertstream.cli.errors import UsageError

TESTED_BEAM = ("2.77", "2.78")  # scripts/tools/other_beam.py runs the Beam-sensitive tests on the one CI lacks
# Partitions per worker thread when --dask_npartitions is not given: enough to balance uneven ranges.
PARTITIONS_PER_THREAD = 4
# How long a failed run waits for its tasks still running on workers to stop.
CANCEL_WAIT_S = 120.0


def check_beam_version(version: str = beam.__version__) -> None:
    """Refuse a Beam this runner was not tested on: it reaches into Beam internals that change."""
    if ".".join(version.split(".")[:2]) not in TESTED_BEAM:
        raise UsageError(
            "runner",
            f"DaskRunner: bertstream's Dask runner is tested on apache-beam {', '.join(TESTED_BEAM)} only, "
            f"this is {version}; install apache-beam=={TESTED_BEAM[-1]}.* or choose another --runner",
        )


class _NoMetrics(MetricResults):
    """Dask collects no Beam metrics: an empty answer, not Beam's NotImplementedError (counters are data)."""

    def query(self, filter: Any = None) -> dict[str, list]:
        return {
            self.COUNTERS: [],
            self.DISTRIBUTIONS: [],
            self.GAUGES: [],
            self.STRINGSETS: [],
            self.BOUNDED_TRIES: [],
        }


def _running_task_threads(dask_worker: Any) -> int:
    """On a worker (``Client.run``): how many of its threads are running a task now."""
    return len(dask_worker.active_threads)


class DaskRunResult(PipelineResult):
    """A job on a Dask cluster: waits for its sinks, then closes the client (Beam's never does)."""

    def __init__(self, client: Any, futures: list[Any], keys: set[Any]) -> None:
        super().__init__(PipelineState.RUNNING)
        self.client = client
        self.futures = futures
        self.keys = keys

    def wait_until_finish(self, duration: int | None = None) -> str:
        from dask.distributed import as_completed
        from distributed.scheduler import KilledWorker

        if self._state == PipelineState.DONE:
            return self._state
        try:
            # Results gathered one by one so that a worker's exception is raised here (the sinks hold none).
            for _ in as_completed(
                self.futures, timeout=None if duration is None else duration / 1000, with_results=True
            ):
                pass
            # A future the scheduler cancelled (a dependency it lost, a job it dropped) is yielded, not raised.
            lost = [f.key for f in self.futures if f.status != "finished"]
            if lost:
                raise RuntimeError(f"the Dask scheduler did not finish {lost[0]!r}: see the scheduler's log")
            self._state = PipelineState.DONE
        except KilledWorker as e:
            self._state = PipelineState.FAILED
            self._stop_tasks()
            raise RuntimeError(
                f"a Dask worker died running {e.task!r} (killed, or out of memory?) and the scheduler may not "
                "retry it again (distributed.scheduler.allowed-failures); see the workers' logs"
            ) from e
        except BaseException:
            self._state = PipelineState.FAILED
            self._stop_tasks()
            raise
        finally:
            self.client.close()
        return self._state

    def _stop_tasks(self) -> None:
        """Cancel the job and wait until none of its tasks runs: a shard writer still running on a worker
        would otherwise write into --output after the launcher has cleaned up after the failure."""
        try:
            self.client.cancel(self.futures, force=True)
            deadline = time.monotonic() + CANCEL_WAIT_S
            while time.monotonic() < deadline:
                running = {str(k) for keys in self.client.processing().values() for k in keys}
                # A cancelled task already in a worker thread runs to its end (Dask cannot interrupt it), and
                # the scheduler stops listing it at once: wait for the workers' threads themselves too.
                if not running & self.keys and not any(self.client.run(_running_task_threads).values()):
                    return
                time.sleep(0.5)
        except Exception:  # noqa: BLE001 - the scheduler is gone: so are the tasks it ran
            return

    def cancel(self) -> str:
        self._stop_tasks()
        self.client.close()
        self._state = PipelineState.CANCELLED
        return self._state

    def metrics(self) -> MetricResults:
        return _NoMetrics()


class DaskRunner(beam_dask.DaskRunner):
    """Runs a pipeline on a dask.distributed cluster (``--dask_client_address``; without it, a local cluster)."""

    def __init__(self) -> None:
        check_beam_version()
        super().__init__()

    def run_pipeline(self, pipeline: beam.Pipeline, options: PipelineOptions) -> DaskRunResult:
        from dask.distributed import Client

        from bertstream.pipelines.runners.dask_graph import GraphBuilder

        refuse_staging(options)
        dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = beam_dask.DaskOptions._extract_bag_kwargs(dask_options)
        # Beam 2.78's --dask_lazy_side_inputs (a side input computed partition by partition) is no Client
        # argument: Beam's runner pops it too. Ours computes each side input once for all partitions anyway.
        dask_options.pop("lazy_side_inputs", None)
        if dask_options.get("address"):
            probe_scheduler(str(dask_options["address"]))
        else:
            # Our own local cluster: its scheduler's and workers' logs are its inner workings, not the run's report
            # (30 INFO lines a run, and now and then a worker's heartbeat traceback as the cluster closed: round 9,
            # L.dask.pre). A failing task still reaches the client, and the run's one Error: line says it.
            dask_options.setdefault("silence_logs", logging.CRITICAL)  # the worker processes' own handlers
            logging.getLogger("distributed").setLevel(logging.CRITICAL)  # this process: the scheduler runs here
        client = Client(**dask_options)
        try:
            check_workers(client)
            npartitions = bag_kwargs.get("npartitions") or PARTITIONS_PER_THREAD * worker_threads(client)
            pipeline.replace_all(beam_dask.dask_overrides())
            builder = GraphBuilder(npartitions, bag_kwargs.get("partition_size"))
            pipeline.visit(builder)
            job = builder.job()
            keys = {str(k) for k in job.__dask_graph__()}
            futures = [client.compute(job, optimize_graph=False)]
        except BaseException:
            client.close()
            raise
        return DaskRunResult(client, futures, keys)


# A Dask scheduler writes its handshake as soon as a client connects; this is how long to wait for it.
PROBE_SECONDS = reach.PROBE_SECONDS
# The first 8 bytes of a Dask TCP message are a frame count (little-endian): "HTTP/1.1" read as one is 3.07 EiB.
_MAX_FRAMES = 1 << 16


def probe_scheduler(address: str, seconds: float = PROBE_SECONDS) -> None:
    """Refuse, in one line, an address that is no Dask scheduler before ``Client`` hangs on it or allocates
    what an HTTP reply's bytes spell as a frame length: one that refuses connections, sends nothing (an HTTP
    server waits for a request), or sends what no Dask message starts with. Only ``tcp://`` (the default
    scheme) is probed; TLS and other comms are left to Dask."""
    import struct

    scheme, sep, rest = address.partition("://")
    if sep and scheme != "tcp":
        return
    host, _, port = (rest if sep else address).rpartition(":")
    flag = f"--dask_client_address={address}"
    if not host or not port.isdigit():
        raise UsageError("dask_client_address", f"{flag}: expected tcp://HOST:PORT")
    try:
        with reach.connect(host.strip("[]"), int(port), seconds) as conn:  # the name lookup bounded too
            conn.settimeout(seconds)
            head = b""
            while len(head) < 8:
                chunk = conn.recv(8 - len(head))
                if not chunk:
                    break
                head += chunk
    except reach.Unreachable as e:
        why = "refuses connections (is the scheduler running?)" if e.refused else e.why
        raise UsageError("dask_client_address", f"{flag}: {why}") from None
    except TimeoutError:
        raise UsageError(
            "dask_client_address", f"{flag}: no Dask scheduler answered within {seconds:g} s (an HTTP port?)"
        ) from None
    except OSError as e:
        raise UsageError("dask_client_address", f"{flag}: cannot connect ({e.strerror or e})") from None
    if len(head) < 8 or struct.unpack("<Q", head)[0] > _MAX_FRAMES:
        shown = head[:8].decode("ascii", "replace").strip() or "nothing"
        raise UsageError("dask_client_address", f"{flag}: answers as no Dask scheduler does ({shown!r}...)")


def refuse_staging(options: PipelineOptions) -> None:
    """Beam's DaskRunner stages nothing: a --setup_file would be ignored, and the workers would run whatever
    bertstream they have. Refused, so that no one believes the code shipped."""
    from apache_beam.options.pipeline_options import SetupOptions

    setup = options.view_as(SetupOptions)
    for flag, value in (
        ("setup_file", setup.setup_file),
        ("extra_package", setup.extra_packages),
        ("requirements_file", setup.requirements_file),
    ):
        if value:
            raise UsageError(
                flag,
                f"DaskRunner stages no packages (--{flag} would be ignored): install bertstream on every Dask "
                "worker instead (pip install it there, or a shared checkout on PYTHONPATH)",
            )


def worker_threads(client: Any) -> int:
    """Threads of the cluster's workers now (at least 1: workers may still be starting)."""
    return max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()))


def check_workers(client: Any) -> None:
    """Each worker must run this Beam and import bertstream: DaskRunner ships no code (a worker without it
    would fail every task with a traceback of unpickling errors)."""
    try:
        versions = client.run(eval, "__import__('apache_beam').__version__")
        client.run(exec, "import bertstream.pipelines, bertstream.schemas")
    except ImportError as e:
        raise UsageError(
            "runner",
            f"DaskRunner: a worker of the cluster at {client.scheduler.address} cannot import {e.name} "
            "(install bertstream and its dependencies on every Dask worker)",
        ) from None
    other = {w: v for w, v in versions.items() if v != beam.__version__}
    if other:
        w, v = next(iter(other.items()))
        raise UsageError(
            "runner", f"DaskRunner: worker {w} runs apache-beam {v}, this launcher {beam.__version__}: use one on all"
        )
