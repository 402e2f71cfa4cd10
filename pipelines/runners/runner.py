"""Pipeline construction shared by every bertstream pipeline: options pass-through and the default runner.

Without ``--runner`` the pipeline runs on Beam's in-process ``FnApiRunner`` (never the DirectRunner, which
first tries to download the Prism binary). ``--direct_num_workers=N`` (N > 1) runs N worker processes;
``--direct_running_mode=multi_threading`` is refused because it loses elements in Beam 2.77.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import signal
import sys
import tempfile
import threading
import traceback

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from bertstream.cli.errors import UsageError
from bertstream.cli.machine import check_processes
from bertstream.pipelines.runners import beam_worker, fork_server, reach


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas (Beam's gRPC threads each get one, ~60 MB of resident memory
    per process for nothing here). Only affects arenas created from now on; a no-op off glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


# Runners bertprep replaces by its own (pipelines/runners/dask_runner.py says why); keys are lower case.
DASK_RUNNER = "bertstream.pipelines.runners.dask_runner.DaskRunner"
RUNNER_ALIASES = {
    "dask": DASK_RUNNER,
    "daskrunner": DASK_RUNNER,
    "apache_beam.runners.dask.dask_runner.daskrunner": DASK_RUNNER,
}


def import_runner(beam_args: list[str]) -> str | None:
    """The ``--runner`` to use (``RUNNER_ALIASES`` applied); when given by its full name, its module
    imported: runners outside Beam's core define their options there (``--dask_client_address``), and
    those are unknown until it is imported."""
    runner = PipelineOptions(beam_args).view_as(StandardOptions).runner
    runner = RUNNER_ALIASES.get(runner.lower(), runner) if runner else runner
    if runner and runner != DASK_RUNNER:
        check_documented(runner)
    if runner and "." in runner:
        module = runner.rpartition(".")[0]
        try:
            importlib.import_module(module)
        except ImportError as e:
            hint = " (pip install 'bertstream[dask]')" if runner == DASK_RUNNER else ""
            raise UsageError("runner", f"--runner={runner}: cannot import {module} ({e}){hint}") from None
    return runner


def check_documented(runner: str) -> None:
    """Refuse a ``--runner`` that is not one of Beam's runners (by short or full name, as Beam's
    ``create_runner`` looks them up): Beam imports and calls any dotted name it is given (``os.system``)."""
    from apache_beam.runners.runner import _RUNNER_MAP  # the table create_runner reads; no public one holds full names

    lower = runner.lower()
    full = {name.lower() for name in _RUNNER_MAP.values()}
    if lower in _RUNNER_MAP or lower + "runner" in _RUNNER_MAP or lower in full:
        return
    names = ", ".join([*StandardOptions.KNOWN_RUNNER_NAMES, "DaskRunner"])
    raise UsageError("runner", f"--runner={runner}: not one of the runners Beam documents ({names})")


def check_every_argument(beam_args: list[str]) -> dict[str, str | None]:
    """Every argument left to Beam is one of its options or an option's value: Beam's parser drops the rest
    silently (the shell's other matches of an unquoted ``--input in/f*.txt``; ``--direct-num-workers=2``,
    spelled with dashes, left the default 1), and the run would record them as its options. A single-valued
    option given twice with two values is refused too (Beam's parser keeps the last, as bertprep's own flags
    no longer do). Returns ``option -> value`` of the options given (None: a flag without a value)."""
    actions = _beam_option_actions()
    stray: list[str] = []
    given: dict[str, str | None] = {}
    waiting: argparse.Action | None = None  # an option whose value is the next argument
    for arg in beam_args:
        if arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            if flag not in actions:
                near = "--" + flag.lstrip("-").replace("-", "_")
                hint = f" (Beam's options are spelled with underscores: {near})" if near in actions else ""
                raise UsageError("beam option", f"unknown option: {flag}{hint}")
            waiting = actions[flag] if not eq and actions[flag].nargs != 0 else None
            if eq:
                _check_value(flag, actions[flag], value)
                _given_once(given, flag, actions[flag], value)
            elif waiting is None:
                _given_once(given, flag, actions[flag], None)
        elif waiting is not None:
            _check_value(waiting.option_strings[0], waiting, arg)
            _given_once(given, waiting.option_strings[0], waiting, arg)
            waiting = None
        else:
            stray.append(arg)
    if stray:
        shown = ", ".join(stray[:3]) + (", ..." if len(stray) > 3 else "")
        raise UsageError(
            "beam option",
            f"{len(stray)} argument(s) that are no option: {shown} (an --input pattern the shell expanded? quote it)",
        )
    return given


def _given_once(given: dict[str, str | None], flag: str, action: argparse.Action, value: str | None) -> None:
    """Record ``flag``'s value; a second, different value of a single-valued option is refused (Beam's other
    actions, ``--experiments`` and ``append`` ones, collect every value)."""
    key = action.dest
    if not isinstance(action, argparse._StoreAction):  # noqa: SLF001 - argparse has no public name for it
        given.setdefault(key, value)
        return
    if key in given and given[key] != value:
        raise UsageError(
            "beam option",
            f"{flag} is given twice ({given[key]!r}, {value!r}): give it once (a later one would not replace an "
            "earlier one)",
        )
    given[key] = value


def _check_value(flag: str, action: argparse.Action, value: str) -> None:
    """The value converts as Beam's parser will convert it, or one line (Beam's parser exits with its usage)."""
    convert = action.type if callable(action.type) else None
    try:
        converted = convert(value) if convert is not None else value
    except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
        kind = getattr(convert, "__name__", "value")
        raise UsageError("beam option", f"{flag}={value}: not a valid {kind} ({e})") from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(str(c) for c in action.choices)
        raise UsageError("beam option", f"{flag}={value}: must be one of {choices}")


def _beam_option_actions() -> dict[str, argparse.Action]:
    """Beam's option strings (``--dask_client_address``, whose value is ``address``) and their actions, from the
    parser ``PipelineOptions.get_all_options`` builds: every options class imported so far."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    subset: dict[str, type[PipelineOptions]] = {}
    for cls in PipelineOptions.__subclasses__():
        subset.setdefault(str(cls), cls)
    for cls in subset.values():
        cls._add_argparse_args(parser)  # noqa: SLF001 - how Beam itself collects them
    return dict(parser._option_string_actions)  # noqa: SLF001


def pipeline_options(beam_args: list[str], reaches: dict[str, list[str]] | None = None) -> PipelineOptions:
    """Beam's options from ``beam_args``, checked; the servers the run needs probed with a deadline
    (:mod:`bertstream.pipelines.runners.reach`): ``--job_endpoint``, and the object stores of the URLs in
    ``reaches`` (flag -> paths: inputs, vocabulary, output)."""
    runner = import_runner(beam_args)
    options = PipelineOptions(beam_args)
    options.view_as(StandardOptions).runner = runner
    given = check_every_argument(beam_args)  # first: Beam's own parser prints its whole usage for a bad value
    known = options.get_all_options()
    unknown = [a for a in options.get_all_options(retain_unknown_options=True) if a not in known]
    if unknown:
        raise UsageError("beam option", f"unknown option(s): {', '.join('--' + u for u in unknown)}")
    _check_local_workers(options, given)
    if options.view_as(StandardOptions).streaming:
        # bertprep's pipelines read files to their end and write one dataset: Beam would run them as they are
        # under --streaming or not at all (the FnApiRunner ignores it), and the manifest would say streaming.
        raise UsageError("streaming", "--streaming: bertprep's pipelines are batch pipelines over files; drop it")
    # Inputs are listed, the vocabulary read and the output folder checked in this process before the
    # pipeline starts: they need the same filesystem options (--s3_endpoint_url, credentials) as its workers.
    from apache_beam.io.filesystems import FileSystems

    FileSystems.set_options(options)
    reach.probe_job_endpoint(options)
    reach.probe_stores(reaches or {}, options)
    return options


def _check_local_workers(options: PipelineOptions, given: dict[str, str | None]) -> None:
    """The embedded runner's worker settings mean what they say: ``--direct_num_workers=0`` is one worker per
    core (Beam's meaning, which ran one worker in this process before), ``in_memory`` runs in this process and
    so takes no worker count above 1, ``multi_threading`` loses elements."""
    direct = options.view_as(DirectOptions)
    workers = direct.direct_num_workers
    if workers < 0:  # Beam indexes its worker list with it (IndexError)
        raise UsageError("direct_num_workers", f"--direct_num_workers={workers}: must be >= 0 (0: one per core)")
    if workers == 0:
        direct.direct_num_workers = workers = os.cpu_count() or 1
        check_processes("direct_num_workers", workers, f"--direct_num_workers=0 (one per core: {workers})")
    else:
        check_processes("direct_num_workers", workers, f"--direct_num_workers={workers}")
    if direct.direct_running_mode == "multi_threading":
        raise UsageError(
            "direct_running_mode",
            "--direct_running_mode=multi_threading loses elements in Beam 2.77; "
            "use --direct_num_workers=N (worker processes)",
        )
    if given.get("direct_running_mode") == "in_memory" and workers > 1:
        raise UsageError(
            "direct_running_mode",
            f"--direct_running_mode=in_memory runs in this process, one worker, but --direct_num_workers is "
            f"{workers}: drop one of them (N workers: --direct_num_workers=N alone)",
        )


def local_threads_per_worker(options: PipelineOptions) -> int:
    """Cores each worker may use: the machine's cores shared by the embedded runner's workers, else 1."""
    if options.view_as(StandardOptions).runner is not None:
        return 1  # distributed runners already run a worker per core
    workers = options.view_as(DirectOptions).direct_num_workers or 1
    return max(1, (os.cpu_count() or 1) // workers)


def runner_name(options: PipelineOptions) -> str:
    return options.view_as(StandardOptions).runner or "FnApiRunner"


def local_worker_processes(options: PipelineOptions) -> int:
    """How many worker processes the embedded runner starts for ``options`` (0: it runs in this process, or the
    run is another runner's): what a run's summary says beside the runner's name, which is FnApiRunner either way."""
    if options.view_as(StandardOptions).runner is not None:
        return 0
    direct = options.view_as(DirectOptions)
    if (direct.direct_num_workers or 1) > 1 or direct.direct_running_mode == "multi_processing":
        return direct.direct_num_workers or os.cpu_count() or 1
    return 0


# The log file of the current run's local worker processes (None: no worker processes, or no run yet).
_worker_log: list[str | None] = [None]


def worker_log_path(run_id: str) -> str:
    """Where the local worker processes of run ``run_id`` write their stderr (tracebacks, Beam's chatter)."""
    return os.path.join(tempfile.gettempdir(), f"bertprep-{run_id}-workers.log")


def current_worker_log() -> str | None:
    """The worker log of the run in progress, when it has one with something in it."""
    path = _worker_log[0]
    return path if path and os.path.exists(path) and os.path.getsize(path) else None


def discard_worker_log() -> None:
    path, _worker_log[0] = _worker_log[0], None
    if path and os.path.exists(path):
        os.remove(path)


# Why the run stopped when a local worker process died under it (None: none died), and whether the run's
# own code has taken the resulting interrupt (then the signals that deliver it stop).
_worker_died: list[str | None] = [None]
_death_handled = [False]


# How a worker that ended on Ctrl-C (SIGINT, or its exit status 130) is recorded: the run was interrupted.
INTERRUPTED = "interrupted"


def worker_death() -> str | None:
    """How a local worker process of this run ended, when one died (killed, out of memory) during the run."""
    return _worker_died[0]


def death_signal_pending() -> bool:
    """A signal now is the one :func:`_stop_main_thread` repeats until the run's code takes it."""
    return _worker_died[0] is not None and not _death_handled[0]


def run_pipeline(p: beam.Pipeline) -> None:
    """Run ``p`` to the end; a failure (a worker's death included) stops the signals of :func:`_stop_main_thread`."""
    try:
        p.run().wait_until_finish()
    except BaseException:
        _death_handled[0] = True
        raise
    finally:
        fork_server.stop(_fork_server[0])
        _fork_server[0] = None


# The fork server of the run's local worker processes (pipelines/runners/fork_server.py): socket path and pid.
_fork_server: list[tuple[str, int] | None] = [None]


def _warm_worker() -> None:
    """In the fork server, before it forks workers: what every worker would otherwise do first. Beam's worker
    module; in a pretraining run (its segmentation stage imported here to build the graph), numba and the
    segmentation kernel, which every pretraining worker starts on its first batch."""
    limit_malloc_arenas(2)  # as MALLOC_ARENA_MAX=2 does for a worker started cold
    from apache_beam.runners.worker import sdk_worker_main  # noqa: F401

    segment = sys.modules.get("bertstream.pipelines.pretraining.segment")
    if segment is not None:
        segment.scan_documents([["Warm the kernel. It loads once."]])


def _watch_worker_processes() -> None:
    """Make a local worker's death end the run instead of hanging it.

    Beam's ``SubprocessSdkWorker.run`` (a thread per worker) raises when its process exits with an error,
    in that thread, where no one waits: the runner then waits for the dead worker's results forever. Ours
    records the death and stops the main thread (:func:`_stop_main_thread`) as Ctrl-C does (cleanup, one line);
    :func:`worker_death` tells the message apart.
    """
    from apache_beam.runners.portability import local_job_service

    worker = local_job_service.SubprocessSdkWorker
    if getattr(worker.run, "bertprep_watch", False):
        return
    original = worker.run

    def run(self) -> None:
        try:
            original(self)
        except RuntimeError as e:  # "Worker subprocess exited with return code 137"
            code = str(e).rsplit(" ", 1)[-1]
            if code in (f"-{int(signal.SIGINT)}", str(beam_worker.INTERRUPTED)):
                _worker_died[0] = INTERRUPTED  # Ctrl-C to the process group: the launcher has its own SIGINT
            else:
                _worker_died[0] = f"signal {code[1:]}" if code.startswith("-") else f"exit code {code}"
            _stop_main_thread()

    run.bertprep_watch = True  # type: ignore[attr-defined]
    worker.run = run  # type: ignore[method-assign]


def _stop_main_thread() -> None:
    """End the main thread's wait: by SIGTERM where the CLI handles it as Ctrl-C (a real signal wakes a
    blocked wait; SIGINT may be ignored, as in a background job), else by a KeyboardInterrupt; again every
    half second until :func:`run_pipeline` has it (Beam's runner, leaving, waits for the bundles that wait for
    the dead worker, and only a second interrupt gets it out)."""
    import threading
    import time

    def kick() -> None:
        while not _death_handled[0]:
            if callable(signal.getsignal(signal.SIGTERM)):
                # To the main thread itself: a signal the kernel gives another thread would not wake its wait.
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
            else:
                import _thread

                _thread.interrupt_main()
            time.sleep(0.5)

    threading.Thread(target=kick, name="bertprep-worker-died", daemon=True).start()


def _children(parent: int) -> list[tuple[int, bytes]]:
    """``(pid, command line)`` of each process whose parent is ``parent`` (Linux ``/proc``; none elsewhere)."""
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent:
            found.append((int(name), cmd))
    return found


def stop_worker_processes() -> None:
    """Kill this process's local worker processes (after a failure: a worker left running would keep the
    process from exiting, as Python waits for the thread that waits for it). Workers are direct children:
    Beam's shell ``exec``s them (a shell of an older command line is killed with its children)."""
    for pid, cmd in _children(os.getpid()):
        if b"bertstream.pipelines.runners.beam_worker" in cmd:
            for child, _ in _children(pid):
                _kill(child)
            _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _thread_errors_to_worker_log(args: threading.ExceptHookArgs) -> None:
    """A background thread's exception goes to the run's worker log, not the console. When a worker process
    dies, Beam's gRPC threads for it (``beam_control_read`` and others) raise as their stream breaks, in any
    order with the death itself: on the console that is a traceback before the one ``Error:`` line. Once the
    run's log is discarded (the run ended, its line said), what its threads still raise is the ending's noise:
    a Ctrl-C's workers ending broke ``beam_control_read``'s stream just after "Error: interrupted (Ctrl-C)",
    and a grpc.RpcError traceback followed it (a clean clone's test run, once in four)."""
    if args.exc_type is SystemExit:
        _default_thread_hook(args)
        return
    path = _worker_log[0]
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as log:
        name = args.thread.name if args.thread is not None else "?"
        log.write(f"exception in thread {name}:\n")
        log.write("".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)))


_default_thread_hook = threading.excepthook


def make_pipeline(options: PipelineOptions, run_id: str | None = None) -> beam.Pipeline:
    """The pipeline for ``options``. Local worker processes write their stderr to :func:`worker_log_path`
    (each failure's traceback, 250 lines for one bad file), not the console: the user sees one ``Error:``
    line, which names that file when it is worth reading; our progress lines still reach the console."""
    if options.view_as(StandardOptions).runner is not None:
        return beam.Pipeline(options=options)
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms import environments

    direct = options.view_as(DirectOptions)
    if (direct.direct_num_workers or 1) > 1 or direct.direct_running_mode == "multi_processing":
        # Worker processes, started through our entry point so that they stay quiet.
        log = worker_log_path(run_id or f"{os.getpid()}")
        _worker_log[0] = log
        _worker_died[0], _death_handled[0] = None, False
        _watch_worker_processes()
        threading.excepthook = _thread_errors_to_worker_log
        fork_server.stop(_fork_server[0])
        _fork_server[0] = fork_server.start(direct.direct_num_workers or 1, _warm_worker, beam_worker.run)
        forked = f"{fork_server.ENV}={shlex.quote(_fork_server[0][0])} " if _fork_server[0] else ""
        env = environments.SubprocessSDKEnvironment.from_command_string(
            # exec: the worker replaces Beam's shell, which would print "Killed" if the worker were killed.
            f"exec env BERTPREP_WORKER_LOG={shlex.quote(log)} MALLOC_ARENA_MAX=2 {forked}"
            f"{shlex.quote(sys.executable)} -m bertstream.pipelines.runners.beam_worker"
        )
        direct.direct_running_mode = "in_memory"  # else FnApiRunner replaces our environment with its own
        return beam.Pipeline(runner=FnApiRunner(default_environment=env), options=options)
    return beam.Pipeline(runner=FnApiRunner(), options=options)
