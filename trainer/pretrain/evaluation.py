"""What a pretraining evaluation reports beyond the loss sums: the masked-LM perplexity, and how much of the eval
set it covered (all of it by default; a ``--eval-batches`` subset is said as one)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bertstream.trainer.config import TrainConfig

# exp() overflows a float above ~709.78: a loss that high (never seen; ln of the vocabulary is ~10) reads as e^700
_MAX_EXPONENT = 700.0


def perplexity(mlm_loss: float) -> float:
    """The masked-LM perplexity: ``exp`` of the mean cross-entropy per masked token (Hugging Face run_mlm's
    figure). Not a causal LM's perplexity per token of text: only the masked positions are predicted, each seeing
    both sides, so it is far lower than a left-to-right model's and comparable only with other MLM figures."""
    return math.exp(min(mlm_loss, _MAX_EXPONENT))


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of the eval set each evaluation reads: the first ``batches`` batches of every process
    (``--eval-batches``), or all of it (0). Made once from the flags (:meth:`of`, the one reader); the loop asks
    it how many batches to read, the eval log line how much that was (:meth:`extent`)."""

    batches: int = 0

    @classmethod
    def of(cls, cfg: TrainConfig) -> Coverage:
        return cls(cfg.eval_batches)

    def batches_of(self, steps_per_epoch: int) -> int:
        """The batches to read of an eval set of ``steps_per_epoch`` (each process's)."""
        return min(self.batches, steps_per_epoch) if self.batches else steps_per_epoch

    def extent(self, record: dict[str, Any]) -> str:
        """The eval log line's tail: the perplexity, per masked token, and the instances it covers of the eval
        set."""
        read, held = record["instances"], record["eval_instances"]
        if read >= held:
            extent = f"all {held:,} held-out instances"
        elif self.batches:
            extent = f"{read:,} of {held:,} held-out instances, a subset (--eval-batches {self.batches}; 0 reads all)"
        else:
            extent = (
                f"{read:,} of {held:,} held-out instances (the last {held - read:,}, less than one batch, left out)"
            )
        return f"mlm_perplexity {record['mlm_perplexity']:.2f} (per masked token) over {extent}"
