"""How every ``bertprep`` command fails: one funnel, :func:`bertprep_errors`, around each command's work.

Usage errors (exit 2) name the flag; input errors (exit 1) name the file and say what was not written. One
line, always: whatever fails (a worker process that dies, a missing optional package, an error nobody
foresaw), the user sees one ``Error:`` line; the traceback, when there is one worth keeping, goes to a log
file that the line names. SIGTERM is handled as Ctrl-C (work files removed, one line) and exits 143
(:mod:`bertstream.cli.errors` owns both, for both command lines).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import click

from bertstream.cli import options
from bertstream.cli.errors import UsageError, exit_interrupted, missing_package, one_line, sigterm_as_interrupt
from bertstream.pipelines.common.files import InputError, missing_filesystem_in
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.runners.runner import (
    INTERRUPTED,
    current_worker_log,
    death_signal_pending,
    discard_worker_log,
    stop_worker_processes,
    worker_death,
)
from bertstream.schemas.vocab import VocabError

_STAGE = re.compile(r" \[while running '[^']*'\]")
NO_MANIFEST = "no manifest was written"


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


def interrupted_in(e: BaseException) -> KeyboardInterrupt | None:
    """Ctrl-C inside a DoFn reaches us as Beam's ``RuntimeError: KeyboardInterrupt [while running ...]``."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        if str(seen).startswith("KeyboardInterrupt"):
            return KeyboardInterrupt()
        seen = seen.__cause__ or seen.__context__
    return None


def _worker_signal() -> bool:
    """SIGTERM's first question: is it the signal the runner sends itself when a worker process died?"""
    if worker_death() is None:
        return False
    if death_signal_pending():  # bertstream.pipelines.runners.runner stopping the run for a dead worker
        raise KeyboardInterrupt
    return True  # a late repeat of it, once the run's own cleanup has begun


def error_log(e: BaseException) -> str:
    """Write ``e``'s traceback to a file; its path."""
    import tempfile

    path = ""
    try:
        fd, path = tempfile.mkstemp(prefix=f"bertprep-error-{time.strftime('%Y%m%dT%H%M%S')}-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(redact_text("".join(traceback.format_exception(type(e), e, e.__traceback__))))
    except OSError as log_error:  # the full disk the run itself hit, most often: its traceback replaced the line
        if path:
            with suppress(OSError):
                os.unlink(path)
        return f"none: the log could not be written, {log_error.strerror or log_error}"
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


def _quiet_logs() -> None:
    """After Ctrl-C or SIGTERM, what the workers and Beam's job service log of the same interruption (a worker's
    "Python sdk harness failed" with its KeyboardInterrupt traceback, under load) is said by the one line."""
    logging.disable(logging.CRITICAL)


@contextmanager
def bertprep_errors(cls: type | None = None, outcome: str = NO_MANIFEST) -> Iterator[None]:
    """The funnel of a ``bertprep`` command: what fails inside becomes click's usage error on the flag of
    ``cls`` (the command's config class) or one ``Error:`` line ending with ``outcome`` (what was not written)."""
    try:
        with sigterm_as_interrupt(_worker_signal, hangup=True, on_interrupt=_quiet_logs):
            yield from _funnel(cls, outcome)
    except click.ClickException as e:
        # A URL's password never reaches the console (click types `message` as final: set it all the same).
        setattr(e, "message", one_line(redact_text(e.message)))  # noqa: B010
        log = current_worker_log()
        if log is None or log not in e.message:
            discard_worker_log()  # kept only when the line names it
        raise
    except BaseException:
        discard_worker_log()
        raise
    finally:
        stop_worker_processes()  # after a failure; after a success there are none left
        logging.disable(logging.NOTSET)  # _quiet_logs's, once the workers are gone (an in-process caller goes on)
        # Beam's threads (gRPC readers of dead workers) may raise while the process exits after a failure:
        # the user has had the one line that matters.
        threading.excepthook = lambda args: None


def _funnel(cls: type | None, outcome: str) -> Iterator[None]:
    try:
        yield
        discard_worker_log()
    except UsageError as e:
        if e.param == "beam option":
            raise click.UsageError(f"{e.message} (neither a bertprep option nor a Beam pipeline option)") from None
        raise options.bad_parameter(cls, e) from None
    except VocabError as e:
        raise click.BadParameter(str(e), param_hint="'--vocab'") from None
    except InputError as e:
        discard_worker_log()
        raise click.ClickException(f"{_STAGE.sub('', str(e))}; {outcome}") from None
    except click.ClickException:
        raise
    except KeyboardInterrupt as e:
        _worker_died_or_interrupted(e, outcome)
    except Exception as e:
        _one_line(e, outcome)


def _one_line(e: Exception, outcome: str) -> None:
    interrupt = interrupted_in(e)
    if interrupt is not None:
        _worker_died_or_interrupted(interrupt, outcome)
    cause = input_error_in(e)
    if cause is not None:
        discard_worker_log()
        raise click.ClickException(f"{cause}; {outcome}") from None
    if isinstance(e, ImportError) and missing_package(e) is not None:
        raise click.ClickException(f"{missing_package(e)}; {outcome}") from None
    missing = missing_filesystem_in(e)
    if missing is not None:
        raise click.ClickException(f"{missing}; {outcome}") from None
    if worker_died_in(e):
        if worker_death() == INTERRUPTED:  # the workers ended on a Ctrl-C the main thread has not seen yet
            discard_worker_log()
            exit_interrupted(KeyboardInterrupt(), outcome)
        _worker_died(None, outcome)
    storage = storage_error_in(e)
    if storage is not None:
        raise click.ClickException(f"object store or filesystem failed: {storage}; {outcome}") from None
    path = error_log(e)
    raise click.ClickException(f"{type(e).__name__}: {first_line(e)}; {outcome} (details: {path})") from None


def _worker_died_or_interrupted(e: KeyboardInterrupt, outcome: str) -> None:
    """A SIGINT is Ctrl-C, or the signal the runner sends itself when a worker process died."""
    why = worker_death()
    if why is None or why == INTERRUPTED:  # a worker that ended on the same Ctrl-C died of nothing else
        discard_worker_log()
        exit_interrupted(e, outcome)
    _worker_died(why, outcome)


def _worker_died(why: str | None, outcome: str) -> None:
    log = current_worker_log()
    raise click.ClickException(
        f"a worker process died{f' ({why})' if why else ''}: killed, or out of memory?; {outcome}"
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
            if isinstance(seen, OSError) and seen.filename is not None and seen.strerror:
                return f"{seen.filename}: {seen.strerror}"
            first = seen.args[0] if seen.args and isinstance(seen.args[0], str) else str(seen)
            return f"{type(seen).__name__}: {first.splitlines()[0] if first else first}"
        seen = seen.__cause__ or seen.__context__
    return None
