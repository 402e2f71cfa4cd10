"""One owner for turning errors into ``berttrain`` messages: every command runs inside :func:`reported`.

A wrong flag value (``ConfigError``) is a usage error (exit 2, click's usage line); bad data, checkpoints,
devices or output folders are run-time errors (exit 1): one ``Error:`` line, never a traceback. So are the
failures a user causes without a bug: a data-loader worker killed (out of memory, ``kill``), an optional package
not installed. Ctrl-C and SIGTERM are one line too, exit 130 and 143 (128 + the signal, as the shell reports a
process killed by it); the ``finally`` and cleanup paths run first (partial checkpoints, a run folder that holds
nothing yet). Anything else is a bug and keeps its traceback. Every message is redacted
(``bertstream.schemas.redact``): a URL's password never reaches the console.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from bertstream.cli.errors import ConfigError
from bertstream.schemas.redact import redact

# Optional packages a command may need (plot: matplotlib; s3:// and http:// data: s3fs, aiohttp; ...), and
# whether the train extra brings them (aiohttp comes with s3fs).
_PACKAGES = {"matplotlib": True, "s3fs": True, "aiohttp": True, "tensorboard": True, "gcsfs": False}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so the same cleanup runs. (A
    DataLoader worker that inherits the handler ends quietly on it, as on KeyboardInterrupt.)"""


def _user_errors() -> tuple[type[BaseException], ...]:
    # Imported here: `berttrain --help` stays fast (torch is not loaded).
    from bertstream.schemas.version import SchemaError
    from bertstream.schemas.vocab import VocabError, VocabMismatchError
    from bertstream.trainer.checkpoint import CheckpointError
    from bertstream.trainer.data.refs import ShardError
    from bertstream.trainer.errors import RunError
    from bertstream.trainer.finetune.data import TaskDataError
    from bertstream.trainer.finetune.weights import InitError
    from bertstream.trainer.hf import HFCheckpointError

    # OSError: missing folders, read-only outputs, full disks: the message names the path.
    return (
        RunError,
        ShardError,
        SchemaError,
        VocabError,
        VocabMismatchError,
        CheckpointError,
        HFCheckpointError,
        TaskDataError,
        InitError,
        OSError,
    )


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def reported() -> Iterator[None]:
    try:
        with _sigterm_as_interrupt():
            yield
    except BaseException as e:
        # torch raises a dead loader worker's RuntimeError from its SIGCHLD handler, at any point of the main
        # process: also while this error is being reported (the other workers exit as the loader shuts down). Mute
        # it while the one line is made; SIGCHLD's default action discards the signal, so none is left pending.
        previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL) if _in_main_thread() else None
        try:
            _report(e)
        finally:
            if previous is not None:
                signal.signal(signal.SIGCHLD, previous)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _report(e: BaseException) -> None:
    """Raise what ``e`` becomes: click's usage error, one ``Error:`` line, an exit code; or ``e`` itself (a bug)."""
    if isinstance(e, ConfigError):
        raise click.BadParameter(redact(e.message), param_hint=f"'--{e.param.replace('_', '-')}'") from None
    if isinstance(e, (click.ClickException, SystemExit, click.exceptions.Exit, click.Abort)):
        raise e
    handled = isinstance(e, (KeyboardInterrupt, ImportError, *_user_errors())) or _worker_died(e)
    if not handled:
        raise e  # a bug: its traceback, whole
    _release(e)
    if isinstance(e, KeyboardInterrupt):
        name, code = ("SIGTERM", 143) if isinstance(e, Terminated) else ("Ctrl-C", 130)
        click.echo(
            f"Error: interrupted ({name}); partial checkpoints were removed, the last complete one is kept "
            "(--resume auto continues from it)",
            err=True,
        )
        sys.exit(code)
    if isinstance(e, ImportError):
        raise click.ClickException(_missing_package(e)) from None
    if _worker_died(e):
        raise click.ClickException(
            f"a data-loader worker process died ({_one_line(str(e), type(e).__name__)}): out of memory, or "
            "killed; lower --num-workers or --batch-size; the last complete checkpoint is kept (--resume auto "
            "continues)"
        ) from None
    message = str(e) if not isinstance(e, OSError) or e.filename is None else f"{e.filename}: {e.strerror}"
    raise click.ClickException(_one_line(redact(message), type(e).__name__)) from None


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


def _missing_package(e: ImportError) -> str:
    name = (e.name or "").split(".")[0]
    if name not in _PACKAGES:
        raise e  # not an optional package: a broken installation or a bug, with its traceback
    extra = " (it comes with the train extra: pip install -e '.[train]')" if _PACKAGES[name] else ""
    return f"{_one_line(redact(str(e)), 'ImportError')}: pip install {name}{extra}"


def _one_line(message: str, kind: str) -> str:
    # torch's DataLoader re-raises a worker's error with the worker's traceback in its message: keep the
    # error's own last line, which names the shard.
    if "Original Traceback" in message:
        last = [line for line in message.splitlines() if line.strip()][-1]
        message = last.split(f"{kind}: ", 1)[-1]
    return " ".join(message.split())
