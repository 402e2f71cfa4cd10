"""What a pretraining evaluation reports beyond the loss sums: the masked-LM perplexity, and how much of the eval
set it covered (all of it by default; a ``--eval-batches`` subset is said as one)."""

from __future__ import annotations

import math
from typing import Any

# exp() overflows a float above ~709.78: a loss that high (never seen; ln of the vocabulary is ~10) reads as e^700
_MAX_EXPONENT = 700.0


def perplexity(mlm_loss: float) -> float:
    """The masked-LM perplexity: ``exp`` of the mean cross-entropy per masked token (Hugging Face run_mlm's
    figure). Not a causal LM's perplexity per token of text: only the masked positions are predicted, each seeing
    both sides, so it is far lower than a left-to-right model's and comparable only with other MLM figures."""
    return math.exp(min(mlm_loss, _MAX_EXPONENT))


def eval_extent(record: dict[str, Any], eval_batches: int) -> str:
    """The eval log line's tail: the perplexity, per masked token, and the instances it covers of the eval set
    (``eval_batches``: the flag, 0 for all)."""
    read, held = record["instances"], record["eval_instances"]
    if read >= held:
        extent = f"all {held:,} held-out instances"
    elif eval_batches:
        extent = f"{read:,} of {held:,} held-out instances, a subset (--eval-batches {eval_batches}; 0 reads all)"
    else:
        extent = f"{read:,} of {held:,} held-out instances (the last {held - read:,}, less than one batch, left out)"
    return f"mlm_perplexity {record['mlm_perplexity']:.2f} (per masked token) over {extent}"
