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
from dataclasses import dataclass, field
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
from bertstream.trainer.snapshot import Background, HostCopy, copied_event, describe_write

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
            raise Diverged(
                f"training diverged at step {self.step + 1}: the loss or its gradient is {float(grad_norm)}; stopped "
                "before applying it, the last checkpoint before it is kept (none is written with NaN weights); lower "
                "--lr, or check the data"
            )
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
            raise Diverged(
                f"training diverged at step {step}: the loss or its gradient is {float(self.bad_norm)}; stopped "
                "before applying it, the last checkpoint before it is kept (none is written with NaN weights); lower "
                "--lr, or check the data"
            )

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
    rank learns how it went. ``writes``: the background writer (:mod:`bertstream.trainer.snapshot`), or None to
    write in the loop; ``announce``: log ``checkpoint PATH`` once a background write is complete (pretraining)."""

    config: dict[str, Any]  # config.json: the model, the command's flags, the vocabulary's hash, the world size
    vocab_text: str
    info: D.DistInfo
    writes: Background | None = None
    announce: bool = False
    host: HostCopy = field(default_factory=HostCopy)

    def save(
        self, root: Path, training: Training, state: dict[str, Any], *, keep: int = 1, resumable: bool = True
    ) -> Path | None:
        """``training``'s weights and ``state`` (state.json) as checkpoint ``training.step`` under ``root``, the
        newest ``keep`` kept; ``resumable``: with the optimizer, the schedule and every rank's RNG, what
        :meth:`Training.restore` and a resume read. A collective: every rank calls it. Returns the folder on rank
        0 once written; None while it is written in the background (then :meth:`poll` and :meth:`finish` say
        when it is complete).

        Before the copy, the last background write is waited for, and every rank learns whether it failed: one
        error raised alike on every rank (rank 0's ``CheckpointError``, a full disk), not rank 0 alone while the
        others wait in their next collective."""
        rng = gather_rng(self.info) if resumable else {}
        if resumable:
            state = {"scheduler": training.scheduler.state_dict(), **state}
            if training.scaler is not None:  # fp16's loss scale, so a resume goes on with it
                state["grad_scaler"] = training.scaler.state_dict()
        path = None
        with D.all_or_none(self.info, rank0_only=True):  # no collective inside: rank 0's failure is the run's
            if self.info.is_main:
                self._settle()
                live: dict[str, Any] = {
                    "model": training.raw.state_dict(),
                    "optimizer": training.optimizer.state_dict() if resumable else None,
                    "rng": rng,
                    "state": state,
                }
                copied = live if self.writes is None else self.host.copy(live)  # in the loop: nothing changes it
                ready = copied_event(self.info.device)

                def write() -> Path:
                    ready()
                    return ckpt.save(
                        root,
                        training.step,
                        model_state=copied["model"],
                        optimizer=copied["optimizer"],
                        rng=copied["rng"],
                        state=copied["state"],
                        config=self.config,
                        vocab_text=self.vocab_text,
                        keep=keep,
                    )

                if self.writes is None:
                    path = write()
                else:
                    self.writes.start(write)
        if self.writes is not None:  # (written in the loop: the exchange above was after the write, a barrier)
            self.writes.outstanding = True  # on every rank: they meet for it in poll and finish
        return path

    def poll(self, *, meet: bool) -> None:
        """Between checkpoints, at each step: a background write that ended is announced, or its error raised.
        With one process this is a look at the thread (no device sync); with several, the ranks meet for it only
        where ``meet`` (a log step, which reads the device anyway), so that every rank raises rank 0's error; they
        meet at each log step until the next checkpoint or the end (only rank 0 knows when its write ended)."""
        if self.writes is None or not self.writes.outstanding:
            return
        if not self.info.enabled:
            if self.writes.done():
                self._settle()
                self.writes.outstanding = False
        elif meet:
            with D.all_or_none(self.info, rank0_only=True):
                if self.info.is_main and self.writes.done():
                    self._settle()

    def finish(self) -> None:
        """The end of the run (a collective): the last background write complete, or its error on every rank."""
        if self.writes is not None:
            with D.all_or_none(self.info, rank0_only=True):
                if self.info.is_main:
                    self._settle()
            self.writes.outstanding = False

    def _settle(self) -> None:
        """Rank 0: wait for the write in flight; log it once complete, or raise its error."""
        if self.writes is None or not self.writes.pending:
            return
        path = self.writes.wait()
        if self.announce and path is not None:
            log(describe_write(path, self.writes.seconds))


def background_writes() -> Background:
    """The run's background checkpoint writer (a context manager: leaving it waits for the write in flight); a
    write that fails while the run is already failing for another reason is said on its own line."""
    return Background(report=lambda line: log(f"the checkpoint being written in the background failed too: {line}"))


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
