"""One owner for turning errors into ``berttrain`` messages: every command runs inside :func:`reported`.

A wrong flag value (``TrainConfigError``) is a usage error (exit 2, click's usage line); bad data, checkpoints,
devices or output folders are run-time errors (exit 1): one ``Error:`` line, never a traceback. Anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from trainer.config import TrainConfigError


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


@contextmanager
def reported() -> Iterator[None]:
    try:
        yield
    except TrainConfigError as e:
        raise click.BadParameter(e.message, param_hint=f"'--{e.param.replace('_', '-')}'") from None
    except click.ClickException:
        raise
    except _user_errors() as e:
        message = str(e) if not isinstance(e, OSError) or e.filename is None else f"{e.filename}: {e.strerror}"
        raise click.ClickException(_one_line(message, type(e).__name__)) from None


def _one_line(message: str, kind: str) -> str:
    # torch's DataLoader re-raises a worker's error with the worker's traceback in its message: keep the
    # error's own last line, which names the shard.
    if "Original Traceback" in message:
        last = [line for line in message.splitlines() if line.strip()][-1]
        message = last.split(f"{kind}: ", 1)[-1]
    return " ".join(message.split())
