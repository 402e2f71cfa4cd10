"""Statistics of written instances: computed per shard from the data itself, merged, summarised.

Raw statistics are additive (counts and histograms) so shards merge exactly; :func:`summarize` derives
fractions, means and percentiles for the manifest and the console.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.schemas.masking import num_to_predict


@dataclass(frozen=True, kw_only=True, slots=True)
class StatsSpec:
    """What reading the statistics back from written instances needs: the [MASK] id and the masking rule."""

    mask_id: int
    max_seq_length: int
    max_predictions: int
    masked_lm_prob: float
    whole_word: bool


def batch_stats(batch: InstanceBatch, spec: StatsSpec) -> dict[str, Any]:
    mask_id, max_seq_length, max_predictions = spec.mask_id, spec.max_seq_length, spec.max_predictions
    lengths = batch.lengths
    k = batch.num_predictions
    # What happened at each prediction, read back from the data: [MASK], the original kept, or another id.
    row = np.repeat(np.arange(len(batch)), k)
    at = batch.ids[batch.offsets[row] + batch.positions]
    is_mask = at == mask_id
    kept = ~is_mask & (at == batch.labels)
    rule = num_to_predict(lengths, spec.masked_lm_prob, max_predictions)
    rule = np.minimum(rule, lengths - 3)
    return {
        "instances": int(len(batch)),
        "not_next": int(batch.next_sentence_label.sum()),
        "tokens": int(lengths.sum()),
        "length_histogram": np.bincount(lengths, minlength=max_seq_length + 1).tolist(),
        "predictions_histogram": np.bincount(k, minlength=max_predictions + 1).tolist(),
        "predictions": int(k.sum()),
        "masked": int(is_mask.sum()),
        "kept": int(kept.sum()),
        "random": int((~is_mask & ~kept).sum()),
        # Without whole-word masking every instance must follow the count rule exactly.
        "count_rule_violations": 0 if spec.whole_word else int((k != rule).sum()),
    }


def merge(stats: Iterable[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for s in stats:
        for key, value in s.items():
            if isinstance(value, list):
                cur = total.setdefault(key, [0] * len(value))
                if len(cur) < len(value):
                    cur.extend([0] * (len(value) - len(cur)))
                for i, v in enumerate(value):
                    cur[i] += v
            else:
                total[key] = total.get(key, 0) + value
    return total


def _percentile(hist: np.ndarray, q: float) -> int:
    c = np.cumsum(hist)
    return int(np.searchsorted(c, q / 100.0 * c[-1], side="left")) if c[-1] else 0


def summarize(raw: dict[str, Any], max_seq_length: int) -> dict[str, Any]:
    n = raw.get("instances", 0)
    if not n:
        return {"instances": 0}
    hist = np.asarray(raw["length_histogram"], dtype=np.float64)
    lengths = np.arange(len(hist))
    mean = float((hist * lengths).sum() / n)
    std = float(np.sqrt((hist * (lengths - mean) ** 2).sum() / n))
    phist = np.asarray(raw["predictions_histogram"], dtype=np.float64)
    preds = raw["predictions"] or 1
    return {
        "instances": n,
        "next_sentence": {"is_next": round(1 - raw["not_next"] / n, 4), "not_next": round(raw["not_next"] / n, 4)},
        "length": {
            "mean": round(mean, 2),
            "std": round(std, 2),
            **{f"p{q}": _percentile(hist, q) for q in (1, 5, 10, 25, 50, 75, 90, 99)},
            "fraction_shorter_than_max": round(float(hist[:max_seq_length].sum() / n), 4),
        },
        "masked_positions_per_instance": {
            "mean": round(float((phist * np.arange(len(phist))).sum() / n), 3),
            "count_rule_violations": raw.get("count_rule_violations", 0),
        },
        "mask_fractions": {
            "mask": round(raw["masked"] / preds, 4),
            "random": round(raw["random"] / preds, 4),
            "kept": round(raw["kept"] / preds, 4),
        },
        "tokens": raw["tokens"],
        "length_histogram": raw["length_histogram"],
        "predictions_histogram": raw["predictions_histogram"],
    }
