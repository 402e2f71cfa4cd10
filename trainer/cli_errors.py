"""One owner for turning errors into ``berttrain`` messages: every command runs inside :func:`reported`.

A wrong flag value (``UsageError``) is a usage error on its flag (exit 2, click's usage line; the flag from the
command's config class, ``bertstream.cli.options.flag_for``); bad data, checkpoints,
devices or output folders are run-time errors (exit 1): one ``Error:`` line, never a traceback. So are the
failures a user causes without a bug: a data-loader worker killed (out of memory, ``kill``), an optional package
not installed. Ctrl-C and SIGTERM are one line too, exit 130 and 143 (128 + the signal, as the shell reports a
process killed by it); the ``finally`` and cleanup paths run first (partial checkpoints, a run folder that holds
nothing yet). Anything else is a bug and keeps its traceback. Every message is redacted
(``bertstream.schemas.redact``): a URL's password never reaches the console. Under ``torchrun`` an error is
printed once, by rank 0: one that the ranks exchanged at start (``distributed.all_or_none``), or a usage error
found before they met (:class:`RankZeroGroup`); every rank exits with its code.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click

from bertstream.cli import options
from bertstream.cli.errors import (
    Terminated,
    UsageError,
    exit_interrupted,
    one_line,
    sigterm_as_interrupt,
)
from bertstream.schemas.redact import redact
from bertstream.trainer.errors import error_line, user_errors, worker_died
from bertstream.trainer.run_folder import TRAINING_INTERRUPTED


@contextmanager
def reported(cls: type | None = None, interrupted: str | Callable[[], str] = TRAINING_INTERRUPTED) -> Iterator[None]:
    """The funnel of a ``berttrain`` command; ``cls``, its config class, names the flags of usage errors;
    ``interrupted``, what an interruption leaves (or a function that looks, when it is said)."""
    try:
        # SIGHUP (the terminal closed) and SIGQUIT too: their defaults ended the run on the spot, a checkpoint
        # being written left half-made and no line said so.
        with sigterm_as_interrupt(hangup=True):
            yield
    except BaseException as e:
        # torch raises a dead loader worker's RuntimeError from its SIGCHLD handler, at any point of the main
        # process: also while this error is being reported (the other workers exit as the loader shuts down). Mute
        # it while the one line is made; SIGCHLD's default action discards the signal, so none is left pending.
        previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL) if _in_main_thread() else None
        try:
            _report(e, cls, interrupted)
        finally:
            if previous is not None:
                signal.signal(signal.SIGCHLD, previous)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _report(e: BaseException, cls: type | None, interrupted: str | Callable[[], str] = TRAINING_INTERRUPTED) -> None:
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
    handled = isinstance(e, (KeyboardInterrupt, ImportError, *user_errors())) or worker_died(e)
    if not handled:
        raise e  # a bug: its traceback, whole
    _release(e)
    if worker_died(e) and "Terminated" in str(e):  # a scheduler signalled the worker: the run's SIGTERM
        e = Terminated()
    if isinstance(e, KeyboardInterrupt):
        exit_interrupted(e, interrupted if isinstance(interrupted, str) else interrupted())
    line = error_line(e)
    if line is None:
        raise e  # an ImportError of no optional package: a broken installation or a bug, with its traceback
    raise click.ClickException(line) from None


def _usage(e: UsageError, cls: type | None) -> click.BadParameter:
    bad = options.bad_parameter(cls, e)
    setattr(bad, "message", one_line(redact(bad.message)))  # noqa: B010 - click types it as final
    return bad


def _agreed(e: BaseException, cls: type | None, ctx: click.Context | None = None) -> NoReturn:
    """An error that every rank raised alike from what the ranks exchanged: rank 0 prints it, once; then the
    ranks end together, as torchrun ends every rank as soon as one exits (rank 0 perhaps before its line)."""
    from bertstream.trainer.distributed import end_together, launched_main

    code = 2 if isinstance(e, UsageError) else 1
    if launched_main():
        shown = click.ClickException(error_line(e) or str(e))
        if isinstance(e, UsageError):
            shown = bad = _usage(e, cls) if e.param else click.UsageError(e.message)
            bad.ctx = ctx or click.get_current_context(silent=True)  # click's usage line, as click adds it
        shown.show()
    end_together()
    raise SystemExit(code)


# The commands whose ranks meet first in an exchange of their start-up checks (``distributed.all_or_none``).
_TOGETHER = ("pretrain", "finetune")


class RankZeroGroup(click.Group):
    """``berttrain``'s command group. Under ``torchrun``, a usage error that a rank of ``pretrain`` or
    ``finetune`` finds before the ranks meet (a flag's value, a path that its node lacks) is taken to their
    first exchange (``distributed.report_together``): rank 0 prints it once, naming the rank unless every
    rank failed alike (each rank printed it, and the others waited for the failed one until --dist-timeout)."""

    # Whether this run is the program's (``trainer.__main__.run`` sets it): only then may its ending set handlers.
    as_program = False

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return self._invoke(ctx)
        finally:
            if self.as_program:  # what follows is click's ending, where a Ctrl-C was "Aborted!", exit 1
                from bertstream.cli.process import quiet_ending

                quiet_ending()

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as e:
            from bertstream.cli.process import exit_stdout_lost, stdout_lost

            if not stdout_lost(e):
                raise
            exit_stdout_lost(e)
        except click.UsageError as e:
            from bertstream.trainer import distributed as D

            world = os.environ.get("WORLD_SIZE", "1").strip()  # not a count: distributed.launch_env says so
            if not world.isdigit() or int(world) <= 1 or ctx.invoked_subcommand not in _TOGETHER:
                raise
            if D.dist.is_initialized():
                raise  # found after the ranks met: exchanged already, or this rank's own
            try:
                outcome = D.Outcome(e.format_message(), usage=True)
                D.report_together(outcome, *D.launch_flags(sys.argv[1:]))
            except UsageError as agreed:
                _agreed(agreed, None, e.ctx)
            raise


def _release(e: BaseException) -> None:
    """Drop the frames the exception holds, so that the suspended batch generators in them close now and shut
    their DataLoader workers down in order (a worker left to notice its parent's exit mid-transfer prints
    multiprocessing's traceback after our line)."""
    import gc

    e.__traceback__ = None
    gc.collect()
