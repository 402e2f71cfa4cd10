"""How both command lines fail: the one usage error, SIGTERM handled as Ctrl-C, and the missing optional package.

``UsageError`` is every bad flag value or environment found before any work, in ``bertprep`` and
``berttrain`` alike, raised by config validation (``check``) and by the jobs' own checks; ``param`` names the
config field (or the flag, without dashes), which each command line maps to its flag with
``bertstream.cli.options.flag_for`` and shows as click's usage error (exit 2). SIGTERM (``kill``, a scheduler's
stop) raises :class:`Terminated` in the main thread, a ``KeyboardInterrupt``, so the cleanup that Ctrl-C runs
runs too; the one ``Error:`` line then exits 130 or 143 (128 + the signal, as the shell reports a process
killed by it).
"""

from __future__ import annotations

import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def one_line(message: str) -> str:
    """``message`` as the one line an ``Error:`` is: a library's own line breaks (pyarrow's end its message with
    one) and runs of spaces become single spaces."""
    return re.sub(r" ([)\]])", r"\1", " ".join(message.split()))


class UsageError(ValueError):
    """A setting is out of range or refused; ``param`` names the offending field or flag (the CLI maps it)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def check(cond: bool, param: str, message: str) -> None:
    """Raise ``UsageError(param, message)`` unless ``cond``: a message names the value it got."""
    if not cond:
        raise UsageError(param, message)


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP: the terminal closed), raised in the main thread like Ctrl-C's KeyboardInterrupt, so
    the same cleanup runs. (A DataLoader or Beam worker that inherits the handler ends quietly on it, as on
    KeyboardInterrupt.)"""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum


# The interruption (Ctrl-C or SIGTERM) raised within :func:`sigterm_as_interrupt`, kept: a library may swallow
# its exception. pyarrow's pandas shim imports pandas lazily, at the first conversion that needs it, under a bare
# ``except:``; a signal landing in that import was lost, and the run trained on to exit 0
# (:func:`raise_if_swallowed`, called where the work can stop cleanly, raises it again).
_raised: list[KeyboardInterrupt] = []


@contextmanager
def sigterm_as_interrupt(
    intercept: Callable[[], bool] | None = None,
    *,
    hangup: bool = False,
    on_interrupt: Callable[[], None] | None = None,
) -> Iterator[None]:
    """Within the block, SIGTERM (and with ``hangup`` SIGHUP, the terminal closed, and SIGQUIT: bertprep's, whose default
    killed the process on the spot, leaving its lock and an --overwrite's earlier dataset in the work folder)
    raises :class:`Terminated`; ``intercept``, when given, is asked first and returns True when the signal was
    its own (bertprep's runner signals itself with SIGTERM when a worker process dies). Ctrl-C raises
    ``KeyboardInterrupt`` as ever (unless it is ignored); both are kept for :func:`raise_if_swallowed`. Outside
    the main thread (a test's runner) signals are left alone. ``on_interrupt`` runs first on either (bertprep
    mutes Beam's logs: its workers' reports of the same interruption came as tracebacks after the one line)."""

    def handler(signum: int, frame: Any) -> None:
        if signum == signal.SIGTERM and intercept is not None and intercept():
            return
        if on_interrupt is not None:
            on_interrupt()
        _raised.append(Terminated(signum))
        raise _raised[-1]

    def ctrl_c(signum: int, frame: Any) -> None:
        if on_interrupt is not None:
            on_interrupt()
        _raised.append(KeyboardInterrupt())
        raise _raised[-1]

    def unraisable(u: Any) -> None:
        if any(u.exc_value is kept for kept in _raised):
            return  # kept, and raised again where the work can stop (raise_if_swallowed): no traceback now
        previous_unraisable(u)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # A signal that lands in a finalizer (``__del__`` as the collector runs, in any line of the main thread) is
    # "Exception ignored in" and a traceback, the interruption lost: the run went on to exit 0 (round 9,
    # SIGTERM to a bertprep --overwrite run as its work folder appeared).
    previous_unraisable = sys.unraisablehook
    sys.unraisablehook = unraisable
    # With ``hangup``, SIGQUIT (Ctrl-\\) too: its default dumps core where no handler runs, and an --overwrite's
    # earlier dataset waited in the work folder for the next run to put it back.
    terminal = [signal.SIGHUP, signal.SIGQUIT] if hangup else []
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, *terminal)}
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:  # not where Ctrl-C is ignored (nohup, a background job)
        signal.signal(signal.SIGINT, ctrl_c)
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)
        # Not where the block set a handler of its own (a program's ending: Ctrl-C from there on is taken as said).
        if previous_int is signal.default_int_handler and signal.getsignal(signal.SIGINT) is ctrl_c:
            signal.signal(signal.SIGINT, previous_int)
        sys.unraisablehook = previous_unraisable
        _raised.clear()


def raise_if_swallowed() -> None:
    """Raise again a Ctrl-C or SIGTERM received within :func:`sigterm_as_interrupt` whose exception something
    swallowed (the work is still running): a loop calls it once a step, so the run stops at most a step late."""
    if _raised:
        raise _raised[-1]


def interrupted_line(e: KeyboardInterrupt, outcome: str) -> tuple[str, int]:
    """The one line and the exit code for Ctrl-C, SIGTERM or SIGHUP: ``Error: interrupted (SIGTERM); OUTCOME``,
    128 + the signal."""
    if isinstance(e, Terminated):
        name = signal.Signals(e.signum).name
        return f"Error: interrupted ({name}); {outcome}", 128 + e.signum
    return f"Error: interrupted (Ctrl-C); {outcome}", 130


def exit_interrupted(e: KeyboardInterrupt, outcome: str) -> None:
    line, code = interrupted_line(e, outcome)
    print(line, file=sys.stderr, flush=True)
    _abandoned.append(True)
    sys.exit(code)


# Set once a command ends on an interrupt: the threads still running are its abandoned work, not to be waited for.
_abandoned: list[bool] = []


def work_abandoned() -> bool:
    """Whether the command ended on an interrupt, its clean-up done and its line printed: the work still running
    in its threads (a Beam runner's bundles) is abandoned, and the process ends without waiting for it (it waited
    until the pipeline ran to its end, minutes at load: after 'Error: interrupted (SIGTERM)', the process
    outlived a 120 s guard)."""
    return bool(_abandoned)


# Optional packages a command may need, and the pip extra that brings each (None: install it by name).
OPTIONAL_PACKAGES = {
    "matplotlib": None,  # a base dependency: missing only from a broken environment
    "s3fs": "train",  # the trainer's s3:// data
    "aiohttp": "train",
    "tensorboard": "train",
    "gcsfs": None,
    "dask": "dask",  # --runner DaskRunner
    "distributed": "dask",
    "rjieba": "chinese",  # --word-segmenter rjieba
    "jieba": None,
    "boto3": None,  # Beam's s3:// (apache-beam[aws])
    "mlflow": "mlflow",  # berttrain --report-to mlflow
    "wandb": "wandb",  # berttrain --report-to wandb
}


def missing_package(e: ImportError) -> str | None:
    """The one line for an optional package that is not installed: what needed it (the error's own first line)
    and how to install it (None: not an optional package, a broken installation or a bug)."""
    name = (e.name or "").split(".")[0]
    if name not in OPTIONAL_PACKAGES:
        return None
    extra = OPTIONAL_PACKAGES[name]
    how = f"pip install {name} (it comes with pip install 'bertstream[{extra}]')" if extra else f"pip install {name}"
    what = " ".join(str(e).split()) or f"{name} is not installed"
    return f"{what}: {how}"
