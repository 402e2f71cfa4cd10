"""How pipeline failures reach the console: usage errors (exit 2) name the flag, input errors (exit 1) name
the file and say that no manifest was written.

One line, always: whatever fails (a worker process that dies, a missing optional package, an error nobody
foresaw), the user sees one ``Error:`` line; the traceback, when there is one worth keeping, goes to a log
file that the line names. SIGTERM is handled as Ctrl-C (work files removed, one line) and exits 143.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import click

from bertstream.cli.errors import ConfigError
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.inputs import missing_filesystem_in
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.common.runner import (
    UsageError,
    current_worker_log,
    death_signal_pending,
    discard_worker_log,
    stop_worker_processes,
    worker_death,
)
from bertstream.schemas.vocab import VocabError

_STAGE = re.compile(r" \[while running '[^']*'\]")


def input_error_in(e: BaseException) -> str | None:
    """Beam wraps worker exceptions; find our InputError's message in the chain or the text."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, InputError):
            return _STAGE.sub("", str(seen))
        seen = seen.__cause__ or seen.__context__
    text = str(e)
    marker = "InputError: "
    if marker in text:
        # Beam's "[while running 'Read/ReadFile/ParDo(_ReadFileFn)']" names a stage, which users never wrote.
        return _STAGE.sub("", text[text.rindex(marker) + len(marker) :].splitlines()[0])
    return None


def interrupted_in(e: BaseException) -> bool:
    """Ctrl-C inside a DoFn reaches us as Beam's ``RuntimeError: KeyboardInterrupt [while running ...]``."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt) or str(seen).startswith("KeyboardInterrupt"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


# Set by the SIGTERM handler: the KeyboardInterrupt it raises was a SIGTERM, whose exit code is 143.
_terminated = [False]


def interrupted(outcome: str = "no manifest was written") -> None:
    """One line, not the traceback of every Beam thread; 130 and 143 are the shell's codes for SIGINT, SIGTERM."""
    discard_worker_log()
    if _terminated[0]:
        click.echo(f"Error: terminated (SIGTERM); {outcome}", err=True)
        sys.exit(128 + signal.SIGTERM)
    click.echo(f"Error: interrupted; {outcome}", err=True)
    sys.exit(130)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler's stop) does what Ctrl-C does: the run's cleanup runs, one line."""

    def handler(signum, frame) -> None:
        if worker_death() is not None:
            if death_signal_pending():  # pipelines.common.runner stopping the run for a dead worker
                raise KeyboardInterrupt
            return  # a late repeat of it, once the run's own cleanup has begun
        _terminated[0] = True
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (a test's runner): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def error_log(e: BaseException) -> str:
    """Write ``e``'s traceback (and the worker log's tail, if any) to a file; its path."""
    fd, path = tempfile.mkstemp(prefix=f"bertprep-error-{time.strftime('%Y%m%dT%H%M%S')}-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(redact_text("".join(traceback.format_exception(type(e), e, e.__traceback__))))
    return path


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return _STAGE.sub("", text.splitlines()[0] if text else type(e).__name__)


# How a local worker process that died (killed, out of memory) shows in the launcher.
_WORKER_DIED = ("Channel closed prematurely", "SDK worker", "Socket closed", "StatusCode.UNAVAILABLE")


def worker_died_in(e: BaseException) -> bool:
    seen: BaseException | None = e
    while seen is not None:
        if any(m in str(seen) for m in _WORKER_DIED):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@contextmanager
def pipeline_errors() -> Iterator[None]:
    _terminated[0] = False
    try:
        with sigterm_as_interrupt():
            yield from _pipeline_errors()
    except click.ClickException as e:
        # A URL's password never reaches the console (click types `message` as final: set it all the same).
        setattr(e, "message", redact_text(e.message))  # noqa: B010
        log = current_worker_log()
        if log is None or log not in e.message:
            discard_worker_log()  # kept only when the line names it
        raise
    except BaseException:
        discard_worker_log()
        raise
    finally:
        stop_worker_processes()  # after a failure; after a success there are none left
        # Beam's threads (gRPC readers of dead workers) may raise while the process exits after a failure:
        # the user has had the one line that matters.
        threading.excepthook = lambda args: None


def _pipeline_errors() -> Iterator[None]:
    try:
        yield
        discard_worker_log()
    except UsageError as e:
        if e.param == "beam option":
            raise click.UsageError(f"{e} (neither a bertprep option nor a Beam pipeline option)") from None
        raise click.BadParameter(str(e), param_hint=f"'--{e.param}'") from None
    except VocabError as e:
        raise click.BadParameter(str(e), param_hint="'--vocab'") from None
    except InputError as e:
        discard_worker_log()
        raise click.ClickException(f"{_STAGE.sub('', str(e))}; no manifest was written") from None
    except (click.ClickException, ConfigError):  # the caller maps a ConfigError to its flag
        raise
    except KeyboardInterrupt:
        _worker_died_or_interrupted()
    except Exception as e:
        if interrupted_in(e):
            _worker_died_or_interrupted()
        cause = input_error_in(e)
        if cause is not None:
            discard_worker_log()
            raise click.ClickException(f"{cause}; no manifest was written") from None
        missing = missing_filesystem_in(e)
        if missing is not None:
            raise click.ClickException(f"{missing}; no manifest was written") from None
        if worker_died_in(e):
            _worker_died(None)
        storage = storage_error_in(e)
        if storage is not None:
            raise click.ClickException(
                f"object store or filesystem failed: {storage}; no manifest was written"
            ) from None
        path = error_log(e)
        raise click.ClickException(
            f"{type(e).__name__}: {first_line(e)}; no manifest was written (details: {path})"
        ) from None


def _worker_died_or_interrupted() -> None:
    """A SIGINT is Ctrl-C, or the signal :mod:`bertstream.pipelines.common.runner` sends when a worker process died."""
    why = worker_death()
    if why is None:
        interrupted()
    _worker_died(why)


def _worker_died(why: str | None) -> None:
    log = current_worker_log()
    raise click.ClickException(
        f"a worker process died{f' ({why})' if why else ''}: killed, or out of memory?; no manifest was written"
        + (f" (worker log: {log})" if log else "")
    ) from None


# What Beam's filesystems raise when an object store (or a disk) fails under a running pipeline: its S3 client's
# own error type (not an OSError), BeamIOError from match/delete, and apitools' HttpError for gs://.
_STORAGE_ERRORS = ("S3ClientError", "BeamIOError", "HttpError", "EndpointConnectionError", "ClientError")


def storage_error_in(e: BaseException) -> str | None:
    """The first line of a filesystem or object-store failure in ``e``'s chain (its URL is in it), else None."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError) or type(seen).__name__ in _STORAGE_ERRORS:
            first = seen.args[0] if seen.args and isinstance(seen.args[0], str) else str(seen)
            return f"{type(seen).__name__}: {first.splitlines()[0] if first else first}"
        seen = seen.__cause__ or seen.__context__
    return None
