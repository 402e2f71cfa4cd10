"""The trainer's user errors: one base class, :class:`UserError`, for every error that a user causes without a
bug (bad data, a checkpoint or ``--init`` that does not fit, a flag that a run cannot honour), which ``berttrain``
shows as one ``Error:`` line (exit 1; :mod:`bertstream.trainer.cli_errors`), never a traceback. Each names
the path or the flag to change. Bad flag values found before any work are ``bertstream.cli.errors.UsageError``
(exit 2); the schemas' errors (``SchemaError``, ``VocabError``) are the schemas' own. :func:`error_line` is the
one line each of them shows.
"""

from __future__ import annotations

from bertstream.cli.errors import missing_package, one_line
from bertstream.schemas.redact import redact

# How a training run that ended on an error goes on from its last complete checkpoint (the loader's worker
# dying, here; a silent peer: ``bertstream.trainer.peers``), said where those errors are worded: at the bottom, as
# the run folder's module (``trainer.run_folder``, which words --resume otherwise) reads checkpoints, whose errors
# are these.
CONTINUES = "--resume auto continues"


class UserError(Exception):
    """Base of the trainer's user errors: the message is the whole report (a path or a flag to change)."""


class RunError(UserError, RuntimeError):
    """A run cannot start or continue as asked; the message names the flag that decides it."""


def user_errors() -> tuple[type[BaseException], ...]:
    # Imported here: `berttrain --help` stays fast (torch is not loaded).
    from bertstream.schemas.version import SchemaError
    from bertstream.schemas.vocab import VocabError, VocabMismatchError
    from bertstream.schemas.whole_file import WholeFileError

    # OSError: missing folders, read-only outputs, full disks: the message names the path. WholeFileError: a
    # small file given as a FIFO, a device or past the cap on a file read whole.
    return (UserError, SchemaError, VocabError, VocabMismatchError, WholeFileError, OSError)


def worker_died(e: BaseException) -> bool:
    """torch's words for a loader worker that died, or the broken connection its death leaves when it was killed
    in the middle of handing over a batch (the loader's queue is the trainer's only process connection)."""
    if isinstance(e, RuntimeError) and str(e).startswith("DataLoader worker"):
        return True
    return isinstance(e, (ConnectionResetError, BrokenPipeError, EOFError)) and getattr(e, "filename", None) is None


def error_line(e: BaseException) -> str | None:
    """The one ``Error:`` line of a user error ``e`` (None: a bug, which keeps its traceback): what ``cli_errors``
    prints, and what a rank tells the others when its start-up checks fail (``distributed.all_or_none``)."""
    if isinstance(e, ImportError):
        return missing_package(e)
    if worker_died(e):
        return (
            f"a data-loader worker process died ({_one_line(str(e), type(e).__name__)}): out of memory, or "
            f"killed; lower --num-workers or --batch-size; the last complete checkpoint is kept ({CONTINUES})"
        )
    if not isinstance(e, user_errors()):
        return None
    message = str(e) if not isinstance(e, OSError) or e.filename is None else f"{e.filename}: {e.strerror}"
    return _one_line(redact(message), type(e).__name__)


def _one_line(message: str, kind: str) -> str:
    # torch's DataLoader re-raises a worker's error with the worker's traceback in its message: keep the
    # error's own last line, which names the shard.
    if "Original Traceback" in message:
        last = [line for line in message.splitlines() if line.strip()][-1]
        message = last.split(f"{kind}: ", 1)[-1]
    return one_line(message)
