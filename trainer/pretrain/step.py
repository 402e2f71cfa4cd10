"""One pretraining step's mechanics: its micro-batches' counts (:class:`StepCounts`), forward and backward
(:func:`train_step`), its FLOPs, and the loss sums of a logging interval (:class:`Running`).

Loss normalisation is exact across ranks and accumulation micro-steps: the masked-token and sequence counts
of all a step's micro-batches on all ranks are summed (counted on the host where the batches were collated;
across ranks one small asynchronous all-reduce, never a read back), and every micro-batch contributes
``sum of its losses / global count``. A step that does not log reads no tensor into Python: the device runs
ahead of the host until a log step. So W ranks with batch B, or one rank with
B/k and ``--grad-accum k``, follow the same trajectory as one process with batch W*B (float rounding aside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bertstream.trainer import distributed as D
from bertstream.trainer import runtime as R
from bertstream.trainer import unpad
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data.collate import Batch, Counts
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.model_config import batch_flops
from bertstream.trainer.pretrain.evaluation import perplexity

# tokens, slots: real tokens and positions the encoder computed (padding included), summed like the losses
_STAT_KEYS = ("mlm_sum", "mlm_correct", "mlm_count", "nsp_sum", "nsp_correct", "nsp_count", "tokens", "slots")


@dataclass(slots=True)
class Running:
    """Sums over the current logging interval (this rank)."""

    stats: torch.Tensor  # [8]: _STAT_KEYS
    steps: int = 0

    @classmethod
    def zero(cls, device: torch.device) -> Running:
        return cls(torch.zeros(len(_STAT_KEYS), dtype=torch.float64, device=device))

    def add(self, out: dict[str, torch.Tensor]) -> None:
        """Add one forward output's loss sums and counts (detached)."""
        with torch.no_grad():
            self.stats += torch.stack([out[k].detach().double() for k in _STAT_KEYS])

    def summary(self, info: D.DistInfo) -> dict[str, float]:
        """Means over all ranks: the one place the interval's sums are divided by its counts."""
        v = dict(zip(_STAT_KEYS, D.all_reduce_sum(self.stats.clone(), info).tolist()))
        mlm = v["mlm_sum"] / max(v["mlm_count"], 1)
        nsp = v["nsp_sum"] / max(v["nsp_count"], 1)
        out = {
            "loss": mlm + nsp,
            "mlm_loss": mlm,
            "mlm_perplexity": perplexity(mlm),
            "nsp_loss": nsp,
            "mlm_accuracy": v["mlm_correct"] / max(v["mlm_count"], 1),
            "nsp_accuracy": v["nsp_correct"] / max(v["nsp_count"], 1),
            "tokens": int(v["tokens"]),
            "slots": int(v["slots"]),
        }
        if not v["nsp_count"]:  # --no-nsp: nothing to report
            del out["nsp_loss"], out["nsp_accuracy"]
        return out


@dataclass(slots=True)
class StepCounts:
    """An optimizer step's counts: this rank's, born on the host where its batches were collated, and the
    divisors of its losses (masked tokens, sequences; all ranks, at least 1). On one rank the divisors are
    those host numbers; on several they are a device tensor whose all-reduce runs while the first micro-batch
    goes forward (:meth:`divisors` waits for it on the device, the host never reads it)."""

    local: Counts
    _divisors: torch.Tensor | tuple[float, float]
    _pending: Any = None  # the all-reduce's work handle until waited for

    def divisors(self) -> torch.Tensor | tuple[float, float]:
        if self._pending is not None:
            self._pending.wait()  # NCCL: the compute stream waits for the all-reduce; no host wait
            self._pending = None
            assert isinstance(self._divisors, torch.Tensor)
            self._divisors.clamp_(min=1)
        return self._divisors


def batch_counts(batch: dict[str, torch.Tensor]) -> Counts:
    """The counts a loader's batch carries (:class:`Batch`); another mapping's are read from its tensors
    (one read each: tests and tools that build batches by hand, never the training loop's loader)."""
    if isinstance(batch, Batch):
        return batch.counts
    weights, mask = batch["masked_lm_weights"], batch["attention_mask"]
    lengths = tuple(int(n) for n in mask.sum(1).tolist())
    return Counts(int(weights.sum().item()), len(batch["next_sentence_labels"]), sum(lengths), lengths)


def step_counts(micro: list[dict[str, torch.Tensor]], info: D.DistInfo) -> StepCounts:
    """The step's counts over its micro-batches; across ranks (several) by an asynchronous all-reduce."""
    local = sum((batch_counts(b) for b in micro), Counts(0, 0, 0))
    if not info.enabled:
        return StepCounts(local, (float(max(local.masked, 1)), float(max(local.sequences, 1))))
    # from pageable memory with non_blocking: copied to a staging buffer at once, no wait for the device
    sums = torch.tensor([local.masked, local.sequences], dtype=torch.float64).to(info.device, non_blocking=True)
    return StepCounts(local, sums, dist.all_reduce(sums, op=dist.ReduceOp.SUM, async_op=True))


def train_step(
    model: torch.nn.Module,
    micro: list[dict[str, torch.Tensor]],
    counts: StepCounts,
    run: Running,
    raw: BertForPreTraining,
    cfg: TrainConfig,
    info: D.DistInfo,
    amp: R.Precision,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[float, float]:
    """Forward and backward over the step's micro-batches, their sums added to ``run``; returns model FLOPs,
    (useful, computed) (see ``model_config.batch_flops``). ``raw``: the plain model as built (its
    configuration, and whether it unpads: the step follows the model, never a flag of its own); ``amp``: the
    run's precision (its autocast; fp16's ``scaler``).

    The step's loss is every micro-batch's loss sums over the step's global counts: normalised once, exactly.
    DDP averages gradients over ranks, hence ``* world_size``. Nothing is read back to the host."""
    flops = [0.0, 0.0]
    for i, batch in enumerate(micro):
        for k, f in enumerate(step_flops(batch, raw, cfg, amp)):
            flops[k] += f
        lengths = batch_counts(batch).lengths
        batch = R.to_device(batch, info.device)
        if raw.unpad:  # the per-sequence attention's split, from the host's counts (no tensor read)
            batch[unpad.SIZES_KEY] = unpad.sizes(lengths)  # type: ignore[assignment]
        with R.no_sync(model, last=i == len(micro) - 1):
            with amp.autocast():
                out = model(batch, nsp=cfg.objective.nsp)
            masked, sequences = counts.divisors()
            loss = out["mlm_sum"] / masked + out["nsp_sum"] / sequences
            R.backward(loss * info.world_size, scaler)
        run.add(out)
    return flops[0], flops[1]


def step_flops(
    batch: dict[str, torch.Tensor], raw: BertForPreTraining, cfg: TrainConfig, amp: R.Precision
) -> tuple[int, int]:
    """(useful, computed) FLOPs of one micro-batch of model ``raw``, from the counts its loader made on the host
    (no read)."""
    counts, config, device = batch_counts(batch), raw.config, amp.device
    shape = (batch["input_ids"].shape[1], batch["masked_lm_positions"].shape[1])  # T, P: shapes, not reads
    rows = unpad.rows(counts.tokens) if raw.unpad else None
    varlen = unpad.per_sequence(device, amp.dtype, config.attention_dropout, compiled=cfg.compiles(device.type))
    return batch_flops(config, counts.lengths, [counts.masked], shape, rows=rows, varlen=varlen)
