"""What a resume may change: the flags given now against the configuration saved in the checkpoint.

A resume continues the same run, so flags that shape its trajectory (model, optimizer, schedule, batch, seed)
must keep their saved values; a changed one is refused by name (a new phase from the same weights is
``--resume PATH --reset-optimizer``). ``--max-steps`` is the exception, because continuing a finished run is
what it is for: the linear decay is re-planned to end at the new ``--max-steps`` (see :func:`extend_schedule`).
Run-time flags (logging, evaluation, checkpoints, workers, device, precision, compile) may change freely, and
so may the number of processes W with ``--batch-size`` B while W*B stays (elastic resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from bertstream.cli import options
from bertstream.trainer import run_folder
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data.config import dataset_key
from bertstream.trainer.errors import RunError
from bertstream.trainer.model_choice import ModelChoice
from bertstream.trainer.optim.schedule import WarmupLinearDecay
from bertstream.trainer.run_folder import Start

# TrainConfig settings (leaf names, see cli.options) a resume must not change: those tagged FIXED where they are
# declared (all but --max-steps, run-time flags, data and eval data; --batch-size may change with the number
# of processes as long as their product, the global batch, stays). ARCH: the architecture, which a new phase
# (--reset-optimizer) and --init-from give.
FIXED = options.tagged(TrainConfig, options.FIXED)
ARCH = options.tagged(TrainConfig, options.ARCH)


def continued(cfg: TrainConfig, start: Start, world_size: int) -> TrainConfig:
    """The run's configuration when it starts from a checkpoint (``start.restored``): ``cfg`` with what the
    checkpoint knows and the command line did not give (a resume takes each FIXED setting from the run, a new
    phase its architecture, ARCH), then checked against it (:func:`check_resume`, :func:`check_new_phase`): a
    flag given with another value is refused by name. A config built in code (no record of what was given) is
    only checked."""
    restored = start.restored
    if restored is None:
        return cfg
    saved = restored.config
    if cfg.given is not None and isinstance(saved.get("train"), dict):
        old = options.saved_values(TrainConfig, saved["train"])
        names = ARCH if start.new_phase else FIXED
        taken = {n: old[n] for n in names if n in old and n not in cfg.given}
        if taken:
            cfg = TrainConfig.build(**{**options.flat(cfg), **taken}, given=cfg.given)
    if start.new_phase:
        check_new_phase(cfg, saved, restored.path)
    else:
        check_resume(cfg, saved, restored.path, restored.step, world_size=world_size)
    return cfg


def check_resume(cfg: TrainConfig, saved: dict[str, Any], checkpoint: Path, step: int, *, world_size: int = 1) -> None:
    """Refuse a resume whose flags would change the run being continued, naming each flag."""
    steps = cfg.steps  # its steps and batch geometry, which say what a resume must keep
    below = steps.below(step, checkpoint)
    if below is not None:
        raise RunError(below)
    if not isinstance(saved.get("train"), dict):
        return  # a checkpoint from before configs were saved: nothing to compare with
    old, now = options.saved_values(TrainConfig, saved["train"]), options.flat(cfg)  # either saved layout
    refusal = steps.resume_refusal(old, saved.get("world_size", 1), world_size, checkpoint)
    if refusal is not None:  # elastic resume keeps the global batch
        raise RunError(refusal)
    changed = _changed(FIXED, old, now, saved.get("model"))
    if changed:
        listed = "; ".join(f"{_flag(n)} {_shown(now[n])} (the run has {_shown(was)})" for n, was in changed.items())
        raise RunError(
            f"resuming {checkpoint} continues its run, but {listed}: drop {_flags(changed)} (a resume takes the "
            f"run's own), or start a new phase from its weights with {run_folder.new_phase(checkpoint, elsewhere=True)}"
        )


def check_new_phase(cfg: TrainConfig, saved: dict[str, Any], checkpoint: Path) -> None:
    """``--reset-optimizer``: the architecture comes from the checkpoint, so flags that would choose another
    one are refused rather than ignored (and ``--init-from`` beside it, by ``inputs.model_config``, the owner
    of starting weights)."""
    old = options.saved_values(TrainConfig, saved["train"]) if isinstance(saved.get("train"), dict) else {}
    now = options.flat(cfg)
    changed = _changed(ARCH, old, now, saved.get("model"))
    if changed:
        listed = "; ".join(
            f"{_flag(n)} {_shown(now[n])} (the checkpoint has {_shown(was)})" for n, was in changed.items()
        )
        raise RunError(
            f"{run_folder.NEW_PHASE} takes the model of {checkpoint} as it is, but {listed}: drop {_flags(changed)} "
            f"({ModelChoice.NEW_PHASE_MAY_CHANGE})"
        )


def same_data(cfg_data: tuple[str, ...], state: dict[str, Any], fingerprint: str, checkpoint: Path) -> bool:
    """Whether ``--data`` is the dataset the checkpoint's data position belongs to: the same shards by content
    (however the folders are spelled or moved), or for older checkpoints the same resolved folders. A value of
    another type is refused: a list fingerprint was taken for new data (the position restarted without a word),
    numbers in ``data_paths`` failed in a traceback."""
    if "data_fingerprint" in state:
        if not isinstance(state["data_fingerprint"], str):
            raise RunError(f"{checkpoint}/state.json: data_fingerprint {state['data_fingerprint']!r} is not a string")
        return state["data_fingerprint"] == fingerprint
    paths = state.get("data_paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise RunError(f"{checkpoint}/state.json: data_paths {paths!r} is not a list of folder names")
    return [dataset_key(p) for p in paths] == [dataset_key(p) for p in cfg_data]


def extend_schedule(scheduler: LambdaLR, warmup: int, max_steps: int, schedule: str = "linear") -> int | None:
    """Make the restored linear decay of EVERY parameter group end at ``max_steps`` (the old end when
    unchanged): the schedule becomes the one a run planned for ``max_steps`` from the start would follow from this
    step on. Returns the old end when it moved, else None.

    LambdaLR keeps one multiplier per group (the same object for each, as built); replacing only the first left
    the other groups (biases and LayerNorm weights) on the old schedule, at rate 0 past the old end, and a
    checkpoint saved since holds the two ends: each group is compared and replaced."""
    fresh = WarmupLinearDecay(warmup, max_steps, schedule)
    old_ends = [getattr(f, "total", None) for f in scheduler.lr_lambdas]
    if all(end == fresh.total for end in old_ends):
        return None
    scheduler.lr_lambdas = [fresh] * len(scheduler.optimizer.param_groups)
    # The next optimizer step uses the rate LambdaLR set after the last step: recompute it on the new schedule.
    for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base * fresh(scheduler.last_epoch)
    scheduler._last_lr = [g["lr"] for g in scheduler.optimizer.param_groups]
    return next(end for end in old_ends if end != fresh.total)


def group_rates(optimizer: torch.optim.Optimizer) -> str:
    """Each parameter group's learning rate in words ("2 groups: 1e-3 (32 tensors), 1e-3 (14 tensors)"): one
    group left at 0 while the others move is visible at a glance."""
    groups = optimizer.param_groups
    rates = ", ".join(f"{g['lr']:.3g} ({len(g['params'])} tensors)" for g in groups)
    return f"{len(groups)} group{'s' if len(groups) != 1 else ''}: {rates}"


_PATHS = frozenset(leaf.name for leaf in options.leaves(TrainConfig) if leaf.meta.get("path"))


def _changed(names: tuple[str, ...], old: dict[str, Any], now: dict[str, Any], model: Any) -> dict[str, Any]:
    """``name -> the run's value`` of the settings of ``names`` whose value now is another. An architecture
    setting the checkpoint's model records (``--norm-placement``) is compared with the model itself, and one
    not given (None) is the model's own; a path is compared resolved, a number as a number."""
    model = model if isinstance(model, dict) else {}
    out = {}
    for n in names:
        if n in ARCH and n in model:
            if now[n] is not None and now[n] != model[n]:
                out[n] = model[n]
        elif n in old and _norm(n, old[n]) != _norm(n, now[n]):
            out[n] = old[n]
    return out


def _norm(name: str, value: Any) -> Any:
    if name in _PATHS and value:
        return str(Path(value).resolve())
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _flag(name: str) -> str:
    return next(leaf.flag for leaf in options.leaves(TrainConfig) if leaf.name == name)


def _flags(names: Any) -> str:
    return " and ".join(_flag(n) for n in names)


def _shown(value: Any) -> str:
    return "(none)" if value is None else str(value)
