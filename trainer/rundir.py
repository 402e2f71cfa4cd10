"""The run folder while a run holds it: one run per folder at a time (:func:`locked`, :func:`held`), cleared for
``--overwrite`` only once every input has been checked (:func:`prepare`), and removed again when a run that made
it fails before it has anything to keep (:func:`removed_on_failure`). What the folder's settings allow, and the
words that say so, are ``bertstream.trainer.run_folder``'s.

One run per folder at a time (:func:`locked`): ``.berttrain.lock``, taken as ``bertprep`` takes its outputs'
(``bertstream.cli.lock``) before the folder is read, so that a ``finetune --overwrite`` cannot clear a running
``pretrain``'s folder, nor two runs interleave one ``metrics.jsonl`` or rotate each other's checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from bertstream.cli.lock import lock_folder, read_lock
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import progress
from bertstream.trainer import runtime as R
from bertstream.trainer.run_folder import LOCK_NAME, RunFolder, Start, cleared, folder_contents, refuse_file


def _keeps_something(run_dir: Path) -> bool:
    """A checkpoint (pretraining, or fine-tuning's best or resume state) or a metrics record: the run did work."""
    if ckpt.list_checkpoints(run_dir) or ckpt.list_checkpoints(run_dir / "resume"):
        return True
    metrics = run_dir / "metrics.jsonl"
    return metrics.is_file() and metrics.stat().st_size > 0


@contextlib.contextmanager
def removed_on_failure(run_dir: Path, *, enabled: bool = True) -> Iterator[None]:
    """Remove ``run_dir`` (and the parents made for it) when what runs inside fails, or is interrupted, before
    the run has written a checkpoint or a metrics record, and only if the folder did not exist before: a run
    that failed to start leaves nothing behind it created (``runs/x/`` after ``--data nope``)."""
    top = run_dir.absolute()
    made = not top.exists()
    while made and not top.parent.exists():
        top = top.parent
    try:
        yield
    except BaseException:
        if enabled and made and run_dir.is_dir() and not _keeps_something(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
            parent = run_dir.absolute().parent
            while top != run_dir.absolute() and parent.is_relative_to(top):
                with contextlib.suppress(OSError):  # not empty: something else lives there now
                    parent.rmdir()
                parent = parent.parent
        raise


def prepare(start: Start, info: D.DistInfo) -> None:
    """Clear the folder (``--overwrite``) and make it ready for writing; after every input has been checked."""
    run_dir = start.run_dir
    D.barrier(info)  # every rank has read the folder before rank 0 changes it
    with D.all_or_none(info, rank0_only=True):  # and waits until it has, or fails with it
        if info.is_main:
            if start.overwrite:
                clear(run_dir)
                R.log(cleared(run_dir), info)
            run_dir.mkdir(parents=True, exist_ok=True)
            for p in ckpt.remove_partial(run_dir):
                R.log(f"removed incomplete checkpoint {p.name} (a run was killed while writing it)")


def clear(run_dir: Path) -> None:
    """Empty ``run_dir`` (``--overwrite``), all but this run's lock, and make sure it exists."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in folder_contents(run_dir):
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


@contextlib.contextmanager
def locked(run_dir: Path, command: str, *, enabled: bool = True) -> Iterator[None]:
    """Hold ``run_dir``'s lock while the block runs (made first if need be: run it inside
    :func:`removed_on_failure`), or refuse on ``--output`` naming the run that holds it. ``enabled``: rank 0."""
    if not enabled:
        yield
        return
    refuse_file(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    say = lambda line: progress.write(f"[berttrain] {line}")  # noqa: E731
    with lock_folder(str(run_dir), LOCK_NAME, run_id, command, say=say, launch=elastic_launch()):
        yield


@contextlib.contextmanager
def held(folder: RunFolder, command: str, info: D.DistInfo) -> Iterator[Path]:
    """The block runs with the run folder (``--output``) while rank 0 holds its lock (:func:`locked`), and a
    folder that rank 0 made for it is removed if the run fails before it keeps anything
    (:func:`removed_on_failure`). Every rank waits until rank 0 has the lock, or raises its refusal, which rank 0
    alone prints (``all_or_none``)."""
    run_dir = folder.run_dir
    with removed_on_failure(run_dir, enabled=info.is_main), contextlib.ExitStack() as lock:
        with D.all_or_none(info, rank0_only=True):  # the run's refusal, not rank 0's: only rank 0 takes it
            lock.enter_context(locked(run_dir, command, enabled=info.is_main))
        yield run_dir


def elastic_launch() -> tuple[str, int] | None:
    """torchrun's ``--rdzv-id`` and restart count, when the launch is named: its own default id ``none`` is
    shared by unrelated launches, so it names no run."""
    launch = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if launch in ("", "none"):
        return None
    return launch, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def lock_holder(run_dir: Path) -> str | None:
    """The run id in ``run_dir``'s lock as this process sees it (None: no readable lock): every rank of a run
    must read rank 0's, or the ranks do not share the folder (:func:`bertstream.trainer.distributed.agree`)."""
    holder = read_lock(str(run_dir / LOCK_NAME))
    return None if holder is None else str(holder.get("run_id"))
