"""A fine-tuning run's folder before the first step: what an earlier run left there (resumed with
``--resume auto``, refused, or removed with ``--overwrite``) and the flags a resume must keep, as
``bertstream.trainer.pretrain.resume`` does for pretraining, and the run continued from the end of its latest
epoch (:func:`restore`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from bertstream.cli import options
from bertstream.schemas.redact import redact_values
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import run_folder
from bertstream.trainer import runtime as R
from bertstream.trainer.checkpoint_writer import restore_rng
from bertstream.trainer.errors import RunError
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.finetune.data import EpochBatches
from bertstream.trainer.finetune.tasks import TASKS
from bertstream.trainer.metrics import METRICS_FILE
from bertstream.trainer.training import Training

RESULTS_FILE = "results.json"
CONFIG_FILE = "config.json"  # the run's configuration (berttrain finetune --config reads it)
RESUME_DIR = "resume"  # RUN/resume/checkpoints/step-N: the latest epoch's full state (the best is in checkpoints/)
_OUTPUTS = (
    RESULTS_FILE,
    CONFIG_FILE,
    METRICS_FILE,
    *sorted({t.predictions_file for t in TASKS.values()}),
    ckpt.CHECKPOINTS,
    RESUME_DIR,
    "tensorboard",
    "trackers.json",  # (trackers.IDS_FILE) the tracker runs a resume continues: a new run starts new ones
)
# FinetuneConfig fields a resume must not change: those tagged FIXED on their declaration.
FIXED = options.tagged(FinetuneConfig, options.FIXED)


def plan_output(
    run_dir: Path, cfg: FinetuneConfig, inputs: list[tuple[str, str | None]]
) -> tuple[run_folder.Start, list[str]]:
    """(how the run starts: ``start.restored`` is the state to continue, with ``--resume auto`` and a resumable
    run in ``run_dir``, else None; the earlier run's outputs that ``--overwrite`` will remove), as
    :func:`bertstream.trainer.run_folder.plan_outputs` decides from the run folder's section. Read-only: an earlier
    run is refused unless ``--overwrite``, and nothing is removed before every input has been checked
    (:func:`prepare_output`)."""
    run_folder.refuse_file(run_dir)
    run_folder.refuse_other_kind(run_dir, "finetune")
    run_folder.refuse_dataset_or_model(run_dir)
    start, existing = run_folder.plan_outputs(run_dir, cfg.run_folder, run_dir / RESUME_DIR, _OUTPUTS)
    run_folder.check_overlap(start, inputs)  # (flag, path) of what the run reads: finetune.inputs.input_paths
    return start, existing


def prepare_output(run_dir: Path, existing: list[str], info: D.DistInfo) -> None:
    """Remove the earlier run's outputs (``--overwrite``) and make the folder ready for writing."""
    D.barrier(info)  # every rank has read the folder before rank 0 changes it
    with D.all_or_none(info, rank0_only=True):  # and waits until it has, or fails with it
        if info.is_main:
            for name in existing:
                if (run_dir / name).is_dir():
                    shutil.rmtree(run_dir / name)
                else:
                    (run_dir / name).unlink()
            run_dir.mkdir(parents=True, exist_ok=True)
            for p in ckpt.remove_partial(run_dir) + ckpt.remove_partial(run_dir / RESUME_DIR):
                R.log(f"removed incomplete checkpoint {p} (a run was killed while writing it)")


def check_resume(cfg: FinetuneConfig, start: run_folder.Start) -> None:
    """Refuse a resume whose flags would change the run being continued (``start.restored``), naming each
    flag."""
    restored = start.restored
    if restored is None:
        return
    old = options.saved_values(FinetuneConfig, restored.config.get("finetune", {}))  # either saved layout
    new = redact_values(options.flat(cfg))  # the saved flags are redacted (schemas.redact): compare alike
    changed = [n for n in FIXED if n in old and old[n] != new[n]]
    if changed:
        flag = lambda n: options.flag_for(FinetuneConfig, n)  # noqa: E731
        listed = "; ".join(f"{flag(n)} {new[n]} (the run has {old[n]})" for n in changed)
        raise RunError(
            f"{run_folder.continuing(start.run_dir, restored.path)}, but {listed}: pass the run's values, or "
            f"{run_folder.AFRESH_ELSEWHERE}"
        )


def restore(restored: ckpt.Loaded, training: Training, batches: EpochBatches, results: dict, info: D.DistInfo) -> int:
    """Continue the run from the end of its latest epoch (the weights are loaded already): returns the next
    epoch."""
    training.restore(restored)
    state = restored.state
    epoch, epochs, best = state.get("epoch"), state.get("epochs"), state.get("best")
    # state.json is untrusted: a string epoch or a list of epochs failed in a traceback, an edited epoch repeated
    # or skipped epochs without a word. The epochs listed are the epochs done, 1 to epoch, each with its row.
    if not (
        isinstance(epoch, int)
        and not isinstance(epoch, bool)
        and isinstance(epochs, list)
        and len(epochs) == epoch >= 1
        and all(isinstance(row, dict) and row.get("epoch") == i for i, row in enumerate(epochs, 1))
        and (best is None or (isinstance(best, dict) and isinstance(best.get("value", 0), (int, float, type(None)))))
    ):
        raise RunError(
            f"{restored.path}/state.json: damaged fine-tuning state (epoch {epoch!r}, {_count(epochs)} epoch "
            f"row(s), best {type(best).__name__}); resume from an intact run, or {run_folder.AFRESH}"
        )
    try:
        batches.load_state_dict(restored.state["data"])
    except ValueError as e:
        raise RunError(
            f"{restored.path}: its data position does not fit this run ({e}); resume with as many processes as "
            f"saved it ({restored.config.get('world_size', '?')})"
        ) from None
    restore_rng(restored.rng, info, restored.path, restored.config.get("world_size", "?"))
    results["epochs"], results["best"] = restored.state["epochs"], restored.state["best"]
    for key in ("evaluations", "early_stopping"):  # (absent from runs saved before --eval-every and --patience)
        if isinstance(restored.state.get(key), type(results[key])):
            results[key] = restored.state[key]
    R.log(f"resumed from {restored.path} after epoch {restored.state['epoch']} (step {restored.step})", info)
    return int(restored.state["epoch"]) + 1


def _count(rows: object) -> str:
    return str(len(rows)) if isinstance(rows, list) else f"a {type(rows).__name__} of"
