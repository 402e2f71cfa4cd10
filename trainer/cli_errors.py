"""One owner for turning errors into ``berttrain`` messages: every command runs inside :func:`reported`.

A wrong flag value (``TrainConfigError``) is a usage error (exit 2, click's usage line); bad data, checkpoints,
devices or output folders are run-time errors (exit 1): one ``Error:`` line, never a traceback. So are the
failures a user causes without a bug: a data-loader worker killed (out of memory, ``kill``), an optional package
not installed. Ctrl-C and SIGTERM are one line too, exit 130 and 143 (128 + the signal, as the shell reports a
process killed by it); the ``finally`` and cleanup paths run first (partial checkpoints, a run folder that holds
nothing yet). Anything else is a bug and keeps its traceback. Every message is redacted
(``trainer.redact``): a URL's password never reaches the console.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from trainer.config import TrainConfigError
from trainer.redact import redact

# Optional packages a command may need (plot: matplotlib; s3:// and http:// data: s3fs, aiohttp; ...), and
# whether the train extra brings them (aiohttp comes with s3fs).
_PACKAGES = {"matplotlib": True, "s3fs": True, "aiohttp": True, "tensorboard": True, "gcsfs": False}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so the same cleanup runs. (A
    DataLoader worker that inherits the handler ends quietly on it, as on KeyboardInterrupt.)"""


def _user_errors() -> tuple[type[BaseException], ...]:
    # Imported here: `berttrain --help` stays fast (torch is not loaded).
    from schemas.version import SchemaError
    from schemas.vocab import VocabError, VocabMismatchError
    from trainer.checkpoint import CheckpointError
    from trainer.data.refs import ShardError
    from trainer.errors import RunError
    from trainer.finetune.data import TaskDataError
    from trainer.finetune.weights import InitError
    from trainer.hf import HFCheckpointError

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
    except TrainConfigError as e:
        raise click.BadParameter(redact(e.message), param_hint=f"'--{e.param.replace('_', '-')}'") from None
    except click.ClickException:
        raise
    except KeyboardInterrupt as e:
        name, code = ("SIGTERM", 143) if isinstance(e, Terminated) else ("Ctrl-C", 130)
        click.echo(
            f"Error: interrupted ({name}); partial checkpoints were removed, the last complete one is kept "
            "(--resume auto continues from it)",
            err=True,
        )
        sys.exit(code)
    except ImportError as e:
        raise click.ClickException(_missing_package(e)) from None
    except _user_errors() as e:
        message = str(e) if not isinstance(e, OSError) or e.filename is None else f"{e.filename}: {e.strerror}"
        raise click.ClickException(_one_line(redact(message), type(e).__name__)) from None
    except RuntimeError as e:
        if not str(e).startswith("DataLoader worker"):  # torch's words for a worker that died
            raise
        raise click.ClickException(
            f"a data-loader worker process died ({_one_line(str(e), 'RuntimeError')}): out of memory, or killed; "
            "lower --num-workers or --batch-size; the last complete checkpoint is kept (--resume auto continues)"
        ) from None


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
