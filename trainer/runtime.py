"""What the pretraining and fine-tuning loops share: logging, DDP wrapping, dropout seeding, precision,
moving batches, the training state (:class:`Training`: model, optimizer, schedule, step) with its clipped
optimizer step, the eval/train switch, and the checkpoints (:class:`CheckpointWriter`, with every rank's RNG
state). One owner for each, so the two loops cannot drift apart.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import LambdaLR

from bertstream.schemas.redact import redact
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import progress
from bertstream.trainer.errors import RunError

# Batch entries that stay on the host: row bookkeeping (pretraining instance ids, fine-tuning row index).
HOST_KEYS = frozenset({"instance_ids", "index"})


def log(message: str, info: D.DistInfo | None = None) -> None:
    """One ``[berttrain]`` line on stderr, from rank 0 only when ``info`` is given."""
    if info is None or info.is_main:
        progress.write(f"[berttrain] {redact(message)}")


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


@functools.cache
def has_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bf16 natively: every CPU torch runs on, a CUDA GPU from Ampere on (a V100 or T4
    only emulates it, slowly)."""
    return device.type != "cuda" or torch.cuda.is_bf16_supported(including_emulation=False)


def check_precision(precision: str, device: torch.device) -> None:
    """``--precision`` against the device the run computes on: fp16 (its loss scaling is for GPUs) only on CUDA,
    bf16 only where the device has it."""
    if precision == "fp16" and device.type != "cuda":
        raise RunError(
            f"--precision fp16 needs a CUDA GPU (this run computes on {device}; fp16 with loss scaling is for GPUs "
            "without bf16): use --precision fp32 or bf16 on the CPU"
        )
    if precision == "bf16" and not has_bf16(device):
        raise RunError(
            f"--precision bf16: {torch.cuda.get_device_name(device)} has no native bf16 (before Ampere): use "
            "--precision fp16 (with loss scaling) or fp32"
        )


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for ``bf16``, or ``auto`` on a CUDA GPU that has bf16; fp16 autocast for ``fp16`` (its
    gradients scaled: :func:`grad_scaler`); fp32 otherwise."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda" and has_bf16(device)):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device_type=device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scaling (``torch.amp.GradScaler``), None for the other precisions: the loss is
    multiplied before backward so small fp16 gradients do not flush to zero, the gradients divided back before
    clipping, and a step whose gradients overflowed is skipped with a halved scale."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def backward(loss: torch.Tensor, scaler: torch.amp.GradScaler | None) -> None:
    """``loss.backward()``, scaled under fp16 (``scaler``)."""
    (loss if scaler is None else scaler.scale(loss)).backward()


# Scale below which an overflow is no longer fp16's range but a diverged run (from 65536, 17 overflows in a row).
MIN_LOSS_SCALE = 1.0


def to_device(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The model's inputs on ``device`` (``HOST_KEYS`` left out)."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k not in HOST_KEYS}


def wrap(model: nn.Module, info: D.DistInfo, *, find_unused_parameters: bool = False) -> nn.Module:
    """``model`` under DDP when there are several ranks, else ``model`` itself (already on ``info.device``).
    ``find_unused_parameters``: some parameters get no gradient (e.g. the NSP head under --no-nsp)."""
    if not info.enabled:
        return model
    device_ids = [info.local_rank] if info.device.type == "cuda" else None
    return DDP(model, device_ids=device_ids, find_unused_parameters=find_unused_parameters)


def no_sync(model: nn.Module, *, last: bool) -> contextlib.AbstractContextManager:
    """DDP's gradient all-reduce only on the ``last`` micro-batch of an accumulated step."""
    if isinstance(model, DDP) and not last:
        return model.no_sync()
    return contextlib.nullcontext()


def seed_dropout(seed: int, info: D.DistInfo) -> None:
    """A dropout stream per rank (the global torch generator), the same for every run with ``seed``."""
    torch.manual_seed(seed * 1000 + info.rank)


class Diverged(RunError):
    """The loss (so the gradient) became NaN or inf: the run stops before the step that would spoil its weights."""


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
    scaler: torch.amp.GradScaler | None = None  # --precision fp16: loss scaling (grad_scaler)
    skipped: int = 0  # fp16 steps skipped on an overflow, this process's run

    def backward(self, loss: torch.Tensor) -> None:
        backward(loss, self.scaler)

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def optimizer_step(self) -> torch.Tensor:
        """Clip the gradient norm, step optimizer and schedule, clear gradients; returns the norm before clipping.

        A NaN or inf norm (a NaN or inf loss, or an overflowing gradient) stops the run at the step being taken,
        before the optimizer applies it: the weights, and so every checkpoint, stay those of the last good step.
        The norm is already reduced over ranks by DDP, so every rank stops at the same step."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients
        grad_norm = torch.nn.utils.clip_grad_norm_(self.raw.parameters(), self.max_grad_norm)
        finite = bool(torch.isfinite(grad_norm))  # one scalar to the host per step: the price of never training on NaN
        if not finite and self.scaler is not None and self.scaler.get_scale() > MIN_LOSS_SCALE:
            # fp16 overflowed at this scale: the step is skipped (counted, as Hugging Face does) with a halved scale
            self.scaler.update()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            self.skipped += 1
            return grad_norm
        if not finite:
            self.optimizer.zero_grad(set_to_none=True)
            raise Diverged(
                f"training diverged at step {self.step + 1}: the loss or its gradient is {float(grad_norm)}; stopped "
                "before applying it, the last checkpoint before it is kept (none is written with NaN weights); lower "
                "--lr, or check the data"
            )
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return grad_norm

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


@dataclass(frozen=True, slots=True)
class CheckpointWriter:
    """How a run writes its checkpoints: its configuration and vocabulary go into every one; rank 0 writes, every
    rank waits for it."""

    config: dict[str, Any]  # config.json: the model, the command's flags, the vocabulary's hash, the world size
    vocab_text: str
    info: D.DistInfo

    def save(
        self, root: Path, training: Training, state: dict[str, Any], *, keep: int = 1, resumable: bool = True
    ) -> Path | None:
        """``training``'s weights and ``state`` (state.json) as checkpoint ``training.step`` under ``root``, the
        newest ``keep`` kept; ``resumable``: with the optimizer, the schedule and every rank's RNG, what
        :meth:`Training.restore` and a resume read (a collective then: every rank calls it). Returns the folder on
        rank 0."""
        rng = gather_rng(self.info) if resumable else {}
        if resumable:
            state = {"scheduler": training.scheduler.state_dict(), **state}
            if training.scaler is not None:  # fp16's loss scale, so a resume goes on with it
                state["grad_scaler"] = training.scaler.state_dict()
        path = None
        if self.info.is_main:
            path = ckpt.save(
                root,
                training.step,
                model_state=training.raw.state_dict(),
                optimizer=training.optimizer.state_dict() if resumable else None,
                rng=rng,
                state=state,
                config=self.config,
                vocab_text=self.vocab_text,
                keep=keep,
            )
        D.barrier(self.info)
        return path


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) inside, the previous mode after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def gather_rng(info: D.DistInfo) -> dict[str, torch.Tensor]:
    """Every rank's generator states as ``rank{r}.{name}`` (a collective: call it on every rank)."""
    states = D.all_gather_object(ckpt.rng_state(info.device), info)
    return {f"rank{r}.{k}": v for r, s in enumerate(states) for k, v in s.items()}


def restore_rng(rng: Mapping[str, torch.Tensor], info: D.DistInfo, source: Path, saved_world: object) -> None:
    """Set this rank's generators from a :func:`gather_rng` dict; a rank the checkpoint lacks is refused."""
    mine = {k.split(".", 1)[1]: v for k, v in rng.items() if k.startswith(f"rank{info.rank}.")}
    if not mine:
        raise RunError(
            f"{source}: rng.pt holds no state for rank {info.rank} (it was saved by {saved_world} "
            "processes): resume with that many processes"
        )
    try:
        ckpt.set_rng_state(mine, info.device)
    except (TypeError, RuntimeError) as e:  # another tensor type or size: a damaged file (tracebacks before)
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise RunError(f"{source}/rng.pt: rank {info.rank}'s generator state does not load ({first})") from None
