"""The run folder: its settings, declared once for ``berttrain pretrain`` and ``berttrain finetune`` (``--output``,
the folder; ``--resume``, how a run in it goes on; ``--overwrite``, clear it for a new run), and what they decide.
Each command's config holds a :class:`RunFolder` section with its own help, defaults and choices
(``cli.options.section``); the values are checked here, once for both, and what the folder's run becomes
(continued, a new phase, started afresh, or refused) is decided here (:class:`Start`: pretraining's
:func:`plan_run`, fine-tuning's :func:`plan_outputs`), which the loops, restore and the inputs take. The words that
tell a user how a run starts, goes on or is refused, naming these flags, are said here and nowhere else;
``bertstream.trainer.rundir`` holds the folder while a run writes it (its lock, the clearing, the removal of a
folder a failed run made).

The run folder holds one run: it is new or empty, or the run in it is being continued. A non-empty folder whose
run is not continued (``--resume none``, a checkpoint from elsewhere, or no checkpoint to resume) is refused
unless ``--overwrite``, which clears it whole: a new run's metrics next to an old run's checkpoints would make a
later ``--resume auto`` continue the wrong run. A refused folder is a usage error on ``--output`` (exit 2, as
``bertprep`` refuses its outputs). The plan is read-only; ``--overwrite`` clears only after every input has been
opened, and never when an input lies inside the folder (:func:`check_overlap`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol

from bertstream.cli.errors import UsageError, check
from bertstream.cli.lock import lock_file_name
from bertstream.cli.options import opt
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.data.config import dataset_key
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import METRICS_FILE

# --resume's words (its values besides a checkpoint folder): continue the run in --output, or start a new one.
AUTO, NONE = "auto", "none"
CONTINUED_OR_NOT = (AUTO, NONE)  # fine-tuning's choices: it continues its own run or none, never another's
# Fine-tuning's words for the same settings (``FinetuneConfig``'s section): its run keeps results and predictions,
# continues from the end of an epoch, and --overwrite replaces what an earlier run wrote.
FINETUNING_HELP = {
    "output": "Run folder: results.json, predictions, metrics.jsonl, checkpoints/.",
    "resume": "auto: continue the run in --output from the end of its latest epoch (after a kill, the same metrics).",
    "overwrite": "Replace the outputs of an earlier run in --output.",
}
# A new phase (pretraining's --reset-optimizer, ``CheckpointConfig``) starts from the weights of the checkpoint
# that --resume names: its help, and why it is refused without one (``TrainConfig``).
NEW_PHASE_HELP = "With --resume PATH: take the weights only (second training phase)."
NEW_PHASE_NEEDS = "needs --resume PATH (the checkpoint whose weights start the new phase)"
LOCK_NAME = ".berttrain.lock"  # one run per folder at a time (``rundir.locked``); not part of the folder's run
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


def cleared(run_dir: Path) -> str:
    """What rank 0 logs when ``--overwrite`` has emptied the folder (``rundir.prepare``)."""
    return f"--overwrite: cleared {run_dir}"


class PhaseSettings(Protocol):
    """What :func:`plan_run` reads of pretraining's checkpoint section (``config.CheckpointConfig``, whose module
    imports this one)."""

    @property
    def reset_optimizer(self) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFolder:
    """Where a run writes and how a run already there is treated (pretraining's defaults; fine-tuning gives its
    own help, ``--resume none`` and the choices auto and none)."""

    output: str = opt(help="Run folder: metrics.jsonl, checkpoints/, tensorboard/.")
    resume: str = opt(AUTO, "auto (newest valid checkpoint in --output), none, or a checkpoint folder.")
    overwrite: bool = opt(False, "Clear a non-empty --output whole and start a new run there.")

    def __post_init__(self) -> None:
        check(bool(self.output), "output", "is required")  # "" was the current folder: a run written into it
        check(self.resume != "", "resume", "names no checkpoint ('')")  # "" was the current folder: ".: incomplete"

    def refuse_remote(self, written: str, remote: Sequence[str]) -> None:
        """The folder must be local: a run renames checkpoints into it and writes local files (``written``: what
        the command writes so); ``remote``: the flags of the command's inputs that may be URLs, said in the same
        line."""
        inputs = f"{' and '.join(remote)} may be s3://..."
        check("://" not in self.output, "output", f"{self.output}: the run folder must be local ({written}); {inputs}")

    def refuse_checkpoint_path(self) -> None:
        """Fine-tuning continues the run in its own folder or none: a checkpoint folder given as ``--resume`` (a
        config built in code; its flag takes auto or none only) is refused."""
        check(self.resume in CONTINUED_OR_NOT, "resume", f"must be auto or none, got {self.resume!r}")

    @property
    def run_dir(self) -> Path:
        """The run folder, as the run writes it."""
        return Path(self.output)

    @property
    def continues(self) -> bool:
        """``--resume auto``: the run in the folder goes on from its latest checkpoint, when it has one."""
        return self.resume == AUTO

    @property
    def checkpoint_path(self) -> str | None:
        """``--resume PATH``: the checkpoint folder the run starts from (None: ``auto`` or ``none``)."""
        return None if self.resume in CONTINUED_OR_NOT else self.resume


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


def plan_run(run_dir: Path, folder: RunFolder, checkpoint: PhaseSettings, *, data: Sequence[tuple[str, str]]) -> Start:
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
    contents = folder_contents(run_dir)
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
    contents = folder_contents(run_dir)
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


def folder_contents(run_dir: Path) -> list[str]:
    """What the folder holds, its lock aside, and a lock being taken: another rank of the same launch may be
    taking it while this one plans (one rank of two was refused so, the folder "holding other files")."""
    return (
        sorted(p.name for p in run_dir.iterdir() if not lock_file_name(p.name, LOCK_NAME)) if run_dir.is_dir() else []
    )


def _listing(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())
