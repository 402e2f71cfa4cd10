"""One owner for turning errors into ``berttrain`` messages: every command runs inside :func:`reported`.

A wrong flag value (``UsageError``) is a usage error on its flag (exit 2, click's usage line; the flag from the
command's config class, ``bertstream.cli.options.flag_for``); bad data, checkpoints,
devices or output folders are run-time errors (exit 1): one ``Error:`` line, never a traceback. So are the
failures a user causes without a bug: a data-loader worker killed (out of memory, ``kill``), an optional package
not installed. Ctrl-C and SIGTERM are one line too, exit 130 and 143 (128 + the signal, as the shell reports a
process killed by it); the ``finally`` and cleanup paths run first (partial checkpoints, a run folder that holds
nothing yet). Anything else is a bug and keeps its traceback. Every message is redacted
(``bertstream.schemas.redact``): a URL's password never reaches the console.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click

from bertstream.cli import options
from bertstream.cli.errors import (
    Terminated,
    UsageError,
    exit_interrupted,
    missing_package,
    one_line,
    sigterm_as_interrupt,
)
from bertstream.schemas.redact import redact


def _user_errors() -> tuple[type[BaseException], ...]:
    # Imported here: `berttrain --help` stays fast (torch is not loaded).
    from bertstream.schemas.version import SchemaError
    from bertstream.schemas.vocab import VocabError, VocabMismatchError
    from bertstream.trainer.errors import UserError

    # OSError: missing folders, read-only outputs, full disks: the message names the path.
    return (UserError, SchemaError, VocabError, VocabMismatchError, OSError)


@contextmanager
def reported(cls: type | None = None) -> Iterator[None]:
    """The funnel of a ``berttrain`` command; ``cls``, its config class, names the flags of usage errors."""
    try:
        with sigterm_as_interrupt():
            yield
    except BaseException as e:
        # torch raises a dead loader worker's RuntimeError from its SIGCHLD handler, at any point of the main
        # process: also while this error is being reported (the other workers exit as the loader shuts down). Mute
        # it while the one line is made; SIGCHLD's default action discards the signal, so none is left pending.
        previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL) if _in_main_thread() else None
        try:
            _report(e, cls)
        finally:
            if previous is not None:
                signal.signal(signal.SIGCHLD, previous)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _report(e: BaseException, cls: type | None) -> None:
    """Raise what ``e`` becomes: click's usage error, one ``Error:`` line, an exit code; or ``e`` itself (a bug)."""
    if getattr(e, "agreed", False):
        _agreed(e, cls)
    if isinstance(e, UsageError):
        raise _usage(e, cls) from None
    if isinstance(e, click.ClickException):
        setattr(e, "message", one_line(e.message))  # noqa: B010
        raise e
    if isinstance(e, (SystemExit, click.exceptions.Exit, click.Abort)):
        raise e
    handled = isinstance(e, (KeyboardInterrupt, ImportError, *_user_errors())) or _worker_died(e)
    if not handled:
        raise e  # a bug: its traceback, whole
    _release(e)
    if _worker_died(e) and "Terminated" in str(e):  # a scheduler signalled the worker: the run's SIGTERM
        e = Terminated()
    if isinstance(e, KeyboardInterrupt):
        exit_interrupted(
            e, "partial checkpoints were removed, the last complete one is kept (--resume auto continues from it)"
        )
    line = error_line(e)
    if line is None:
        raise e  # an ImportError of no optional package: a broken installation or a bug, with its traceback
    raise click.ClickException(line) from None


def _usage(e: UsageError, cls: type | None) -> click.BadParameter:
    bad = options.bad_parameter(cls, e)
    setattr(bad, "message", one_line(redact(bad.message)))  # noqa: B010 - click types it as final
    return bad


def _agreed(e: BaseException, cls: type | None) -> NoReturn:
    """An error that every rank raised alike from what the ranks exchanged: rank 0 prints it, once; then the
    ranks end together, as torchrun ends every rank as soon as one exits (rank 0 perhaps before its line)."""
    from bertstream.trainer.distributed import end_together, launched_main

    code = 2 if isinstance(e, UsageError) else 1
    if launched_main():
        shown = click.ClickException(error_line(e) or str(e))
        if isinstance(e, UsageError):
            shown = bad = _usage(e, cls)
            bad.ctx = click.get_current_context(silent=True)  # click's usage line, as click adds it when it prints
        shown.show()
    end_together()
    raise SystemExit(code)


def error_line(e: BaseException) -> str | None:
    """The one ``Error:`` line of a user error ``e``, as this process would print it (None: a bug, which keeps
    its traceback): also what a rank tells the others at start-up (``distributed.all_or_none``)."""
    if isinstance(e, ImportError):
        return missing_package(e)
    if _worker_died(e):
        return (
            f"a data-loader worker process died ({_one_line(str(e), type(e).__name__)}): out of memory, or "
            "killed; lower --num-workers or --batch-size; the last complete checkpoint is kept (--resume auto "
            "continues)"
        )
    if not isinstance(e, _user_errors()):
        return None
    message = str(e) if not isinstance(e, OSError) or e.filename is None else f"{e.filename}: {e.strerror}"
    return _one_line(redact(message), type(e).__name__)


def quiet_usage() -> bool:
    """A usage error that this rank leaves to rank 0: one found before the ranks have met (a flag's value), on a
    rank other than 0. Every rank of a launch runs one command line (torchrun passes its own to each worker,
    srun runs one on every node), so every rank finds the same error; each printed it. After the ranks have
    met, the errors they find at start-up are exchanged (``distributed.all_or_none``) and reported once."""
    from bertstream.trainer.distributed import dist, launched_main

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not launched_main() and not dist.is_initialized()


class RankZeroGroup(click.Group):
    """``berttrain``'s command group: a usage error before the ranks have met is printed by rank 0 alone (see
    :func:`quiet_usage`); every rank still ends with exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            if not quiet_usage():
                raise
            raise click.exceptions.Exit(e.exit_code) from None


def _worker_died(e: BaseException) -> bool:
    """torch's words for a loader worker that died, or the broken connection its death leaves when it was killed
    in the middle of handing over a batch (the loader's queue is the trainer's only process connection)."""
    if isinstance(e, RuntimeError) and str(e).startswith("DataLoader worker"):
        return True
    return isinstance(e, (ConnectionResetError, BrokenPipeError, EOFError)) and getattr(e, "filename", None) is None


def _release(e: BaseException) -> None:
    """Drop the frames the exception holds, so that the suspended batch generators in them close now and shut
    their DataLoader workers down in order (a worker left to notice its parent's exit mid-transfer prints
    multiprocessing's traceback after our line)."""
    import gc

    e.__traceback__ = None
    gc.collect()


def _one_line(message: str, kind: str) -> str:
    # torch's DataLoader re-raises a worker's error with the worker's traceback in its message: keep the
    # error's own last line, which names the shard.
    if "Original Traceback" in message:
        last = [line for line in message.splitlines() if line.strip()][-1]
        message = last.split(f"{kind}: ", 1)[-1]
    return one_line(message)
