"""The run folder (``--output``) holds one run: it is new or empty, or the run in it is being continued.

A non-empty folder whose run is not continued (``--resume none``, a checkpoint from elsewhere, or no
checkpoint to resume) is refused unless ``--overwrite``, which clears it whole: a new run's metrics next to
an old run's checkpoints would make a later ``--resume auto`` continue the wrong run.

A refused folder is a usage error on ``--output`` (exit 2, as ``bertprep`` refuses its outputs). A command never
destroys what it did not make, nor before it has checked its inputs: the plan is read-only,
``--overwrite`` clears only after every input has been opened, and never when an input lies inside the folder
(:func:`check_overlap`); a run folder the command made itself is removed again when the run fails before it
has anything to keep (:func:`removed_on_failure`).

One run per folder at a time (:func:`locked`): ``.berttrain.lock``, taken as ``bertprep`` takes its outputs'
(``bertstream.cli.lock``) before the folder is read, so that a ``finetune --overwrite`` cannot clear a running
``pretrain``'s folder, nor two runs interleave one ``metrics.jsonl`` or rotate each other's checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from bertstream.cli.errors import UsageError
from bertstream.cli.lock import lock_file_name, lock_folder, read_lock
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import progress
from bertstream.trainer import runtime as R
from bertstream.trainer.config import CheckpointConfig
from bertstream.trainer.data.config import dataset_key
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import METRICS_FILE
from bertstream.trainer.run_folder import RunFolder

LOCK_NAME = ".berttrain.lock"
# What the ranks of a launch are told when they see different run folders (another lock holder, checkpoint).
SHARED = (
    "every node must see the same run folder: put --output on a file system that all nodes mount at the same "
    "path (node-local folders resume from different checkpoints)"
)


# How a run is continued, branched or started afresh, in the words of the flags that ask it: said here, where the
# start is decided, and built into the messages of the modules that find a problem with it (the resume checks,
# restore, the inputs, fine-tuning's folder).
NEW_PHASE = "--reset-optimizer"
# How a run started from a saved run's flags (``--config``, ``bertstream.trainer.run_config``) starts.
FROM_SAVED_FLAGS = "--overwrite is never taken from it. The run's own --output continues that run (--resume auto)."
AFRESH = "start afresh with --overwrite"
AFRESH_ELSEWHERE = f"{AFRESH} or another --output"


def new_phase(checkpoint: object, *, elsewhere: bool = False) -> str:
    """The flags that start a new phase from ``checkpoint``'s weights (a fresh optimizer, schedule and data
    position); ``elsewhere``: in a run folder of its own."""
    return f"--resume {checkpoint} {NEW_PHASE}" + (" and another --output" if elsewhere else "")


def explained(e: ckpt.CheckpointError) -> str:
    """A checkpoint that does not load, and, when its weights alone still do, how to start a new phase from it."""
    if isinstance(e, ckpt.Incomplete) and e.weights_load:
        return f"{e}; to take its weights only (fresh optimizer, schedule and data position), pass {new_phase(e.path)}"
    return str(e)


def _load(checkpoint: str, *, with_optimizer: bool) -> ckpt.Loaded:
    try:
        return ckpt.load(checkpoint, with_optimizer=with_optimizer)
    except ckpt.Incomplete as e:
        raise ckpt.CheckpointError(explained(e)) from None


def continuing(run_dir: Path, checkpoint: Path) -> str:
    """What fine-tuning's ``--resume auto`` does with the run in ``run_dir``, said where a resume is refused."""
    return f"--resume auto continues the run in {run_dir} ({checkpoint})"


def nothing_to_continue(continues: bool) -> str:
    """Why fine-tuning does not continue the run in its folder (``continues``: ``--resume auto`` was given)."""
    return "no epoch to resume from (--resume auto)" if continues else "--resume none"


@dataclass(frozen=True, slots=True)
class Start:
    """How a run starts, decided once here from the run folder's section (``--output``, ``--resume``,
    ``--overwrite``: ``trainer.run_folder.RunFolder``) and ``--reset-optimizer`` (pretraining's
    :func:`plan_run`, fine-tuning's :func:`plan_outputs`): the loops, restore and the inputs' checks take this,
    not those flags."""

    run_dir: Path
    restored: ckpt.Loaded | None = None  # the checkpoint continued, or whose weights begin a new phase
    new_phase: bool = False  # weights only: the optimizer, schedule and data position start afresh
    overwrite: bool = False  # the folder's earlier run is cleared (by :func:`prepare`, after the inputs' checks)

    @property
    def continued(self) -> ckpt.Loaded | None:
        """The checkpoint whose run goes on (optimizer, schedule, data position and RNG), None for a new run or
        a new phase."""
        return None if self.new_phase else self.restored

    @property
    def weights_given_as(self) -> str:
        """The flag that gave the checkpoint the run starts from, as a message names it."""
        return f"--resume {self.restored.path if self.restored is not None else None}"


def plan_run(
    run_dir: Path, folder: RunFolder, checkpoint: CheckpointConfig, *, data: Sequence[tuple[str, str]]
) -> Start:
    """Where the pretraining run in ``run_dir`` starts: the checkpoint to continue from (None: afresh); raises
    unless that is safe.

    Read-only, so every rank decides the same; :func:`prepare` then clears the folder on rank 0 only.
    """
    resume, overwrite, reset_optimizer = folder.resume, folder.overwrite, checkpoint.reset_optimizer
    start = lambda restored: Start(run_dir, restored, reset_optimizer, overwrite)  # noqa: E731
    refuse_file(run_dir)
    refuse_other_kind(run_dir, "pretrain")
    if overwrite:
        refuse_not_a_run(run_dir)
    for flag, d in data:  # (flag, folder) of each dataset the run reads (pretrain.inputs.data_folders)
        if "://" not in d and _inside(Path(dataset_key(d)), run_dir):
            raise UsageError("output", f"{run_dir} holds {flag} {d}: choose a run folder of its own")
    if resume not in ("auto", "none") and not Path(resume).is_dir():
        raise RunError(f"--resume {resume}: no such checkpoint folder")
    if resume not in ("auto", "none") and _inside(Path(resume), run_dir):
        if overwrite:
            raise RunError(f"--resume {resume} lies inside --output {run_dir}, which --overwrite would clear")
        if reset_optimizer:
            raise RunError(
                f"{NEW_PHASE} starts a new phase at step 0: give it another --output than {run_dir}, "
                "which holds the run it starts from"
            )
        own = ckpt.list_checkpoints(run_dir)
        if own and Path(resume).resolve() != own[-1].resolve():
            raise RunError(
                f"--resume {resume} is not the newest checkpoint of --output {run_dir} ({own[-1].name}): "
                "continuing from it would mix two histories in one folder; resume the newest, or copy "
                "this checkpoint out and pass another --output"
            )
        return start(_load(resume, with_optimizer=not reset_optimizer))
    contents = _contents(run_dir)
    if resume not in ("auto", "none"):
        if contents and not overwrite:
            refuse_existing(run_dir, contents, f"--resume {resume} starts from elsewhere")
        return start(_load(resume, with_optimizer=not reset_optimizer))
    if overwrite or not contents:
        return start(None)
    newest = ckpt.latest(run_dir, explain=explained) if resume == "auto" else None
    if newest is not None:
        return start(newest)
    why = (
        (
            "no complete checkpoint to continue (--resume auto; what is there are other files, or the leftovers of a "
            "run stopped before its first checkpoint)"
        )
        if resume == "auto"
        else "--resume none starts a new run"
    )
    refuse_existing(run_dir, contents, why)


def plan_outputs(run_dir: Path, folder: RunFolder, resumable: Path, outputs: Sequence[str]) -> tuple[Start, list[str]]:
    """Fine-tuning's start in ``run_dir`` (:func:`bertstream.trainer.finetune.resume.plan_output`): the state in
    ``resumable`` (its resume folder) continued under ``--resume auto``, or else the earlier run's ``outputs``
    found in the folder, refused unless ``--overwrite`` (which removes them, once every input is checked):
    (the start, those outputs). Read-only."""
    overwrite = folder.overwrite
    restored = ckpt.latest(resumable, explain=explained) if folder.continues and not overwrite else None
    existing = [name for name in outputs if (run_dir / name).exists()] if restored is None else []
    if existing and not overwrite:
        refuse_existing(run_dir, existing, nothing_to_continue(folder.continues))
    return Start(run_dir, restored, overwrite=overwrite), existing


def check_overlap(start: Start, inputs: Iterable[tuple[str, str | None]]) -> None:
    """``--overwrite`` would delete an input (``(flag, path)``, URLs and None skipped) that lies inside the run
    folder: refuse before anything is removed."""
    if not start.overwrite:
        return
    run_dir = start.run_dir
    inside = [f"{flag} {path}" for flag, path in inputs if path and "://" not in path and _inside(Path(path), run_dir)]
    if inside:
        raise UsageError(
            "output",
            f"{run_dir} overlaps inputs: {', '.join(inside)} lies inside it, and --overwrite would clear it; move "
            "it out or choose another --output",
        )


def refuse_file(run_dir: Path) -> None:
    """A file, or the file system's root, is no run folder (``finetune --output /`` wrote its results, config
    and checkpoints into ``/``, beside the system's folders; bertprep refuses the root too)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError("output", f"{run_dir} is a file, not a run folder")
    try:
        real = run_dir.resolve()
    except (OSError, RuntimeError) as e:  # a link that points at itself: Python 3.11's resolve raises RuntimeError
        raise UsageError("output", f"{run_dir} cannot be followed ({e}): name a folder of the run") from None
    if real == Path(real.anchor):
        raise UsageError("output", f"{run_dir} is the file system's root, not a run folder: name a folder of the run")


def refuse_not_a_run(run_dir: Path) -> None:
    """``--overwrite`` clears a run folder, never a folder of other files: one with no run's trace in it (a
    dataset, a model, someone's notes given as ``--output`` by mistake) is refused, as ``export-hf`` and
    ``bertprep`` refuse theirs; an empty or new folder is fine."""
    contents = _contents(run_dir)
    if contents and not looks_like_run(run_dir):
        raise UsageError(
            "output",
            f"{run_dir} holds no run ({_listing(contents)}; a run folder has {METRICS_FILE}, {ckpt.CHECKPOINTS}/ "
            "or the config.json of a run) and --overwrite clears only a run folder: choose another --output",
        )


def looks_like_run(run_dir: Path) -> bool:
    """A run's metrics, its checkpoints folder, or the ``config.json`` a run writes (its ``train`` settings and
    ``model``; a Hugging Face export's ``config.json`` is not one)."""
    if (run_dir / METRICS_FILE).is_file() or (run_dir / ckpt.CHECKPOINTS).is_dir():
        return True
    return run_kind(run_dir) == "pretrain"


# The key of each command's settings in the config.json of the run folder it writes.
_KIND_KEYS = {"train": "pretrain", "finetune": "finetune"}


def run_kind(run_dir: Path) -> str | None:
    """The command whose run ``run_dir`` holds, by its ``config.json`` (``pretrain``: its ``train`` settings,
    ``finetune``: its ``finetune`` settings, each with its ``model``); None for no run's config.json."""
    try:
        saved = json.loads(read_whole(run_dir / "config.json", "the run's config.json"))
    except (OSError, WholeFileError, ValueError, RecursionError):
        return None
    if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict):
        return None
    kinds = [kind for key, kind in _KIND_KEYS.items() if isinstance(saved.get(key), dict)]
    return kinds[0] if len(kinds) == 1 else None


def refuse_other_kind(run_dir: Path, command: str) -> None:
    """A run folder holds one command's run: ``finetune`` into a pretraining run's folder (its metrics.jsonl and
    config.json are names fine-tuning writes: --overwrite deleted them, the checkpoints left without their
    history), or ``pretrain`` into a fine-tuning run's (--overwrite cleared its results), is refused, --overwrite
    or not."""
    kind = run_kind(run_dir)
    if kind is not None and kind != command:
        raise UsageError(
            "output",
            f"{run_dir} holds a berttrain {kind} run (its config.json), not a {command} run's folder: its files "
            f"would be mixed with this run's or, with --overwrite, deleted; choose another --output",
        )


def refuse_dataset_or_model(run_dir: Path) -> None:
    """A dataset's or a model's folder is no fine-tuning run's, ``--overwrite`` or not: the run's files would be
    mixed into it (and a Hugging Face export's config.json is a name fine-tuning's ``--overwrite`` removes)."""
    foreign = [name for name in (MANIFEST_NAME, ckpt.MODEL_FILE) if (run_dir / name).exists()]
    if foreign:
        raise UsageError(
            "output",
            f"{run_dir} holds {' and '.join(foreign)}: a dataset's or a model's folder, not a fine-tuning run's "
            "(its files would be mixed into it); choose another --output",
        )


def refuse_existing(run_dir: Path, contents: list[str], why: str) -> NoReturn:
    """A folder holding another run (``contents``) that this one does not continue (``why``)."""
    raise UsageError(
        "output",
        f"{run_dir} already holds a run ({_listing(contents)}) and {why}: pass --overwrite to clear it, or "
        "choose another --output",
    )


# What a Ctrl-C or SIGTERM leaves in a run folder, said on its line (``cli_errors.reported``'s default; ``embed`` and
# ``export-hf`` say their own: they were told of checkpoints and --resume auto before, which they have none of).
TRAINING_INTERRUPTED = (
    "partial checkpoints were removed, the last complete one is kept (--resume auto continues from it)"
)
# Before its first checkpoint a run has nothing to keep: "the last complete one is kept" named one that never was.
NO_CHECKPOINT_YET = (
    "no checkpoint had been written yet: rerun with --overwrite to start again from step 0 (the folder holds the "
    "stopped run's config.json and metrics.jsonl)"
)


def training_interrupted(*folders: str | None) -> Callable[[], str]:
    """What an interrupted ``pretrain`` or ``finetune`` leaves in the folders that hold its checkpoints (the run
    folder; fine-tuning's ``resume/`` too), looked at when it is said."""

    def said() -> str:
        try:
            kept = any(ckpt.list_checkpoints(f) for f in folders if f)
        except OSError:  # the folder went away or cannot be read: say what holds in general
            return TRAINING_INTERRUPTED
        return TRAINING_INTERRUPTED if kept else NO_CHECKPOINT_YET

    return said


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
                R.log(f"--overwrite: cleared {run_dir}", info)
            run_dir.mkdir(parents=True, exist_ok=True)
            for p in ckpt.remove_partial(run_dir):
                R.log(f"removed incomplete checkpoint {p.name} (a run was killed while writing it)")


def clear(run_dir: Path) -> None:
    """Empty ``run_dir`` (``--overwrite``), all but this run's lock, and make sure it exists."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in _contents(run_dir):
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


def _contents(run_dir: Path) -> list[str]:
    """What the folder holds, its lock aside, and a lock being taken: another rank of the same launch may be
    taking it while this one plans (one rank of two was refused so, the folder "holding other files")."""
    return (
        sorted(p.name for p in run_dir.iterdir() if not lock_file_name(p.name, LOCK_NAME)) if run_dir.is_dir() else []
    )


def _listing(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())
