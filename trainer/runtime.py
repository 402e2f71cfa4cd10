"""What the pretraining and fine-tuning loops share around a step: logging, precision (autocast, fp16's loss
scaling), DDP wrapping, dropout seeding, moving batches and the eval/train switch. The training state with its
clipped optimizer step is :mod:`bertstream.trainer.training`; the checkpoints a run writes,
:mod:`bertstream.trainer.checkpoint_writer`. One owner for each, so the two loops cannot drift apart.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from bertstream.schemas.redact import redact
from bertstream.trainer import distributed as D
from bertstream.trainer import progress
from bertstream.trainer.config import RunConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.seeds import Seeds

# Batch entries that stay on the host: row bookkeeping (pretraining instance ids, fine-tuning row index).
HOST_KEYS = frozenset({"instance_ids", "index"})


def log(message: str, info: D.DistInfo | None = None) -> None:
    """One ``[berttrain]`` line on stderr, from rank 0 only when ``info`` is given."""
    if info is None or info.is_main:
        progress.write(f"[berttrain] {redact(message)}")


def log_due(run: Any, step: int) -> bool:
    """Whether optimizer step ``step`` is one the loss is logged at (the run section's ``log_every``, read here
    only; both loops ask)."""
    return step % run.log_every == 0


def compute_dtype(device: torch.device, precision: str) -> torch.dtype:
    """The autocast dtype of ``precision`` on ``device``: bf16 for ``bf16``, or ``auto`` on a device that has it
    (CUDA from Ampere on); fp16 for ``fp16``; fp32 otherwise."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda" and has_bf16(device)):
        return torch.bfloat16
    return torch.float16 if precision == "fp16" else torch.float32


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
    """Autocast to :func:`compute_dtype` (none for fp32); fp16's gradients are scaled (:func:`grad_scaler`)."""
    dtype = compute_dtype(device, precision)
    if dtype != torch.float32:
        return torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext()


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scaling (``torch.amp.GradScaler``), None for the other precisions: the loss is
    multiplied before backward so small fp16 gradients do not flush to zero, the gradients divided back before
    clipping, and a step whose gradients overflowed is skipped with a halved scale."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


@dataclass(frozen=True, slots=True)
class Precision:
    """The run's arithmetic: ``--precision`` on the device it computes on, checked and resolved once by
    :meth:`of`. The pretraining step, both evaluations and the FLOP count take this, not the flag: the autocast
    they enter, the dtype it computes in, and fp16's loss scaler."""

    device: torch.device
    mode: str  # one of config.PRECISIONS: auto, fp32, bf16, fp16

    @classmethod
    def of(cls, run: RunConfig, device: torch.device) -> Precision:
        """The run section's precision on ``device`` (read here only; both loops ask), refused in one line where
        the device cannot compute in it (:func:`check_precision`)."""
        check_precision(run.precision, device)
        return cls(device, run.precision)

    @property
    def dtype(self) -> torch.dtype:
        return compute_dtype(self.device, self.mode)

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.device, self.mode)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        return grad_scaler(self.device, self.mode)


def backward(loss: torch.Tensor, scaler: torch.amp.GradScaler | None) -> None:
    """``loss.backward()``, scaled under fp16 (``scaler``)."""
    (loss if scaler is None else scaler.scale(loss)).backward()


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


def seed_dropout(seeds: Seeds, info: D.DistInfo) -> None:
    """A dropout stream per rank (the global torch generator), the same for every run with these ``seeds``."""
    torch.manual_seed(seeds.dropout(info.rank))


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) inside, the previous mode after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
