"""The training state both loops carry whole (:class:`Training`: model, optimizer, schedule, step) with its
clipped optimizer step and its restore from a checkpoint, and how a saved state is loaded into a live one
(:func:`load_state`, :func:`layout_mismatch`): what does not fit is named in one line, never a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.errors import RunError
from bertstream.trainer.optim.advice import DIVERGED_HINT
from bertstream.trainer.runtime import backward


def load_state(target: Any, state: Any, what: str, source: object, **kwargs: Any) -> None:
    """``target.load_state_dict(state)``, or one line naming ``source`` and ``what`` did not fit: a checkpoint's
    config.json that disagrees with its weights, an optimizer.pt of other parameter groups (tracebacks before)."""
    if isinstance(target, nn.Module) and isinstance(state, Mapping):
        # torch's first line says only "Error(s) in loading state_dict for BertForPreTraining:" (e.g. a fine-tuning
        # checkpoint given to --init-from): what does not fit is named here, a few names of each kind.
        mine = target.state_dict()
        missing = [k for k in mine if k not in state] if kwargs.get("strict", True) else []
        extra = [k for k in state if k not in mine] if kwargs.get("strict", True) else []
        shapes = [
            f"{k} {tuple(state[k].shape)}, the model's {tuple(mine[k].shape)}"
            for k in mine
            if k in state and isinstance(state[k], torch.Tensor) and state[k].shape != mine[k].shape
        ]
        parts = [
            f"{label} {len(keys)}: {', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''}"
            for label, keys in (("lacks", missing), ("has others", extra), ("other shapes", shapes))
            if keys
        ]
        if parts:
            raise RunError(f"{source}: its {what} do not fit this run's model ({'; '.join(parts)})")
    try:
        target.load_state_dict(state, **kwargs)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise RunError(f"{source}: its {what} does not fit this run's model ({type(e).__name__}: {first})") from None


def _optimizer_mismatch(fresh_groups: list[dict[str, Any]], optimizer: torch.optim.Optimizer) -> str | None:
    """What of a loaded optimizer state torch does not check: its settings are the run's (fixed on resume; a
    string lr or betas (5, 2) failed at the first step in a traceback), its learning rates finite numbers, and
    every tensor of a parameter's state of its shape and finite (another shape failed at the first step, NaN
    moments read as "training diverged ... lower --lr")."""
    for i, (mine, theirs) in enumerate(zip(fresh_groups, optimizer.param_groups)):
        lr = theirs.get("lr")
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
            return f"param_groups[{i}].lr {lr!r} is not a learning rate"
        for key, value in mine.items():
            if key not in ("lr", "initial_lr", "params") and key in theirs and theirs[key] != value:
                return f"param_groups[{i}].{key} {theirs[key]!r}, this run has {value!r}"
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if not isinstance(value, torch.Tensor) or (value.dim() > 0 and value.shape != param.shape):
                    shown = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    return f"{key} of a parameter of shape {tuple(param.shape)} is {shown}"
                if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                    return f"{key} of a parameter of shape {tuple(param.shape)} holds NaN or inf"
    return None


def layout_mismatch(mine: Any, theirs: Any, where: str) -> str | None:
    """Where JSON state read back (``theirs``) differs in layout from a fresh ``state_dict`` (``mine``): a key
    ``mine`` has that ``theirs`` lacks, a list of another length, a value of another kind (numbers are one kind,
    a bool is none of them); None when it fits. Keys only ``theirs`` has are left to its loader."""
    if isinstance(mine, dict):
        if not isinstance(theirs, dict):
            return f"{where} is {_kind(theirs)}, not an object"
        lacking = next((k for k in mine if k not in theirs), None)
        if lacking is not None:
            return f"{where} lacks {lacking!r}"
        return next((m for k in mine if (m := layout_mismatch(mine[k], theirs[k], f"{where}.{k}"))), None)
    if isinstance(mine, (list, tuple)):
        if not isinstance(theirs, (list, tuple)) or len(theirs) != len(mine):
            return f"{where} is {_kind(theirs)}, not a list of {len(mine)}"
        return next(
            (m for i, (a, b) in enumerate(zip(mine, theirs)) if (m := layout_mismatch(a, b, f"{where}[{i}]"))), None
        )
    if _kind(mine) != _kind(theirs):
        return f"{where} is {_kind(theirs)}, not {_kind(mine)}"
    return None


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    names: dict[type, str] = {str: "a string", list: "a list", tuple: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


# Scale below which an overflow is no longer fp16's range but a diverged run (from 65536, 17 overflows in a row).
MIN_LOSS_SCALE = 1.0


class Diverged(RunError):
    """The loss (so the gradient) became NaN or inf: the run stops before the step that would spoil its weights."""


def diverged(step: int, norm: float) -> Diverged:
    """The one line a diverged run stops with, at ``step`` (its gradient norm ``norm``: NaN or inf)."""
    return Diverged(
        f"training diverged at step {step}: the loss or its gradient is {norm}; stopped before applying it, the "
        f"last checkpoint before it is kept (none is written with NaN weights); {DIVERGED_HINT}"
    )


@dataclass(slots=True)
class Training:
    """What the optimizer steps, carried whole by both loops: the model (as called, and as saved), its optimizer
    and schedule, and the steps taken. Restored from a checkpoint and saved into one as a unit."""

    model: nn.Module  # what is called: compiled and/or under DDP
    raw: nn.Module  # the plain module: its parameters are clipped and stepped, its state_dict saved
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    max_grad_norm: float
    step: int = 0
    bad_step: torch.Tensor | None = None  # see optimizer_step: on the device, read only by check()
    bad_norm: torch.Tensor | None = None
    scaler: torch.amp.GradScaler | None = None  # --precision fp16: loss scaling (grad_scaler)
    skipped: int = 0  # fp16 steps skipped on an overflow, this process's run

    def backward(self, loss: torch.Tensor) -> None:
        backward(loss, self.scaler)

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def optimizer_step(self) -> torch.Tensor:
        """Clip the gradient norm, step optimizer and schedule, clear gradients; returns the norm before clipping.

        Nothing is read back to the host. A NaN or inf norm (a NaN or inf loss, or an overflowing gradient) is
        noted on the device and the optimizer skips the update there (``found_inf``, which every optimizer of
        the table honours): the weights and the optimizer state stay those of the last good step, and so do
        every later step's until :meth:`check` (at the next log step, before an evaluation or a checkpoint)
        stops the run naming the step where it happened. The norm is already reduced over ranks by DDP, so
        every rank skips, and stops, at the same step. ``--precision fp16``: :meth:`_scaled_step`."""
        if self.scaler is not None:
            return self._scaled_step(self.scaler)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.raw.parameters(), self.max_grad_norm)
        if self.bad_step is None or self.bad_norm is None:  # the first step whose norm was not finite (0: none)
            self.bad_step = torch.zeros((), dtype=torch.int64, device=grad_norm.device)
            self.bad_norm = torch.zeros((), dtype=grad_norm.dtype, device=grad_norm.device)
        first = (self.bad_step == 0) & ~torch.isfinite(grad_norm)
        self.bad_step = torch.where(first, self.step + 1, self.bad_step)
        self.bad_norm = torch.where(first, grad_norm, self.bad_norm)
        self.optimizer.found_inf = (self.bad_step != 0).float()  # type: ignore[attr-defined]
        self.optimizer.step()
        return self._advance(grad_norm)

    def _scaled_step(self, scaler: torch.amp.GradScaler) -> torch.Tensor:
        """fp16 with loss scaling (GPUs without bf16): an overflow at this scale skips the step (counted, as
        Hugging Face does) with a halved scale; a non-finite norm at the smallest scale stops the run as
        diverged. One scalar read per step: the scale's decision is the host's."""
        scaler.unscale_(self.optimizer)  # clip the true gradients
        grad_norm = torch.nn.utils.clip_grad_norm_(self.raw.parameters(), self.max_grad_norm)
        finite = bool(torch.isfinite(grad_norm))
        if not finite and scaler.get_scale() > MIN_LOSS_SCALE:
            scaler.update()
            self.skipped += 1
            return self._advance(grad_norm)
        if not finite:
            self.optimizer.zero_grad(set_to_none=True)
            raise diverged(self.step + 1, float(grad_norm))
        scaler.step(self.optimizer)
        scaler.update()
        return self._advance(grad_norm)

    def _advance(self, grad_norm: torch.Tensor) -> torch.Tensor:
        """The schedule and the step count move on, the gradients are cleared."""
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return grad_norm

    def check(self) -> None:
        """:class:`Diverged` if a step's gradient was not finite (one scalar read: call it where the loop
        reads anyway, at log steps and before an evaluation or a checkpoint)."""
        if self.bad_step is None or self.bad_norm is None:
            return
        step = int(self.bad_step)
        if step:
            raise diverged(step, float(self.bad_norm))

    def restore(self, restored: ckpt.Loaded) -> None:
        """A checkpoint's optimizer, schedule and step (its weights are loaded with the model)."""
        fresh_groups = self.optimizer.state_dict()["param_groups"]
        load_state(self.optimizer, restored.optimizer, "optimizer state (optimizer.pt)", restored.path)
        odd = _optimizer_mismatch(fresh_groups, self.optimizer)
        if odd is not None:
            raise RunError(f"{restored.path}/optimizer.pt: damaged optimizer state ({odd})")
        saved = restored.state["scheduler"]
        # LambdaLR loads any JSON without a check: a string, or a string last_epoch, failed later in a traceback;
        # an edited last_epoch would continue another schedule without a word. Its layout is a fresh one's.
        fresh = self.scheduler.state_dict()
        odd = layout_mismatch(fresh, saved, "scheduler")
        if odd is None and saved["last_epoch"] != restored.step:
            odd = f"scheduler.last_epoch {saved['last_epoch']!r} is not the checkpoint's step {restored.step}"
        if odd is None and saved["base_lrs"] != fresh["base_lrs"]:  # --lr (and its groups) are the run's
            odd = f"scheduler.base_lrs {saved['base_lrs']} are not this run's peak rates {fresh['base_lrs']}"
        if odd is not None:
            raise RunError(f"{restored.path}/state.json: damaged scheduler state ({odd})")
        load_state(self.scheduler, saved, "scheduler state (state.json)", restored.path)
        self.step = restored.step
        scale = restored.state.get("grad_scaler")
        if self.scaler is not None and scale is not None:  # (a run saved in another precision has none: a fresh one)
            odd = layout_mismatch(self.scaler.state_dict(), scale, "grad_scaler")
            if odd is None and not (math.isfinite(scale["scale"]) and scale["scale"] > 0):
                odd = f"grad_scaler.scale {scale['scale']!r} is not a positive number"
            if odd is not None:
                raise RunError(f"{restored.path}/state.json: damaged loss-scaler state ({odd})")
            self.scaler.load_state_dict(scale)
