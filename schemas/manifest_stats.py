"""The manifest's ``statistics``, range-checked as its other fields are (:func:`check_statistics`, called by
``check_manifest``): the report and ``inspect`` print and plot them, and a hand-edited or damaged manifest
printed NaN and 1e308 fractions, and a length histogram of 30,000 entries took the report 52 s (3M: past
150 s). Every number is finite; a fraction lies in 0..1, a length or a mean of lengths in 0..max_seq_length;
a histogram holds at most one entry per length the settings allow (``max_seq_length + 1``,
``max_predictions_per_seq + 1``); any other list or mapping at most :data:`MAX_ENTRIES` entries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bertstream.schemas import fields as F
from bertstream.schemas.version import SchemaError

# The longest sequence any manifest may declare (manifest_check.MAX_SEQ_LENGTH): the bound where the
# settings name none.
MAX_LENGTH = 1 << 20
MAX_ENTRIES = MAX_LENGTH + 1
MAX_DEPTH = 6

# Where each kind of figure lives in the statistics pretraining and task runs write (pipelines/pretraining/
# stats.py, pipelines/tasks/finalize.py): "fraction" 0..1, "length" 0..max_seq_length, "count" 0..MAX_COUNT.
_FIELDS = {
    "instances": "count",
    "tokens": "count",
    "rows": "count",
    "next_sentence.is_next": "fraction",
    "next_sentence.not_next": "fraction",
    "length.mean": "length",
    "length.std": "length",
    "length.fraction_shorter_than_max": "fraction",
    "masked_positions_per_instance.mean": "length",
    "masked_positions_per_instance.count_rule_violations": "count",
    "mask_fractions.mask": "fraction",
    "mask_fractions.random": "fraction",
    "mask_fractions.kept": "fraction",
    "mean_length": "length",
    "max_length": "length",
}
_PERCENTILES = ("p1", "p5", "p10", "p25", "p50", "p75", "p90", "p99")


def check_statistics(stats: Mapping[str, Any], max_seq_length: int | None, max_predictions: int | None) -> None:
    """SchemaError naming the first entry of ``statistics`` out of range (``statistics.mask_fractions.mask``)."""
    longest = max_seq_length if max_seq_length is not None else MAX_LENGTH
    _finite(stats, "statistics", 0)
    bounds = {"fraction": 1.0, "length": float(longest), "count": float(F.MAX_COUNT)}
    for path, kind in (*_FIELDS.items(), *((f"length.{p}", "length") for p in _PERCENTILES)):
        value = _at(stats, path)
        if value is not None:
            F.number(value, f"statistics.{path}", 0.0, bounds[kind])
    histograms = {"length_histogram": longest, "predictions_histogram": max_predictions or longest}
    for name, most in histograms.items():
        if name in stats:
            _histogram(stats[name], f"statistics.{name}", most + 1)
    counts = stats.get("label_counts")
    if isinstance(counts, Mapping):
        for label, n in counts.items():
            F.integer(n, f"statistics.label_counts.{label}", 0, F.MAX_COUNT)


def _at(stats: Mapping[str, Any], path: str) -> Any:
    node: Any = stats
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _histogram(value: Any, name: str, most: int) -> None:
    entries = F.array(value, name)
    if len(entries) > most:
        raise SchemaError(
            f"{name}: {len(entries):,} entries, but the settings allow {most:,} (one per length up to the maximum)"
        )
    for i, n in enumerate(entries):
        F.integer(n, f"{name}[{i}]", 0, F.MAX_COUNT)


def _finite(node: Any, name: str, depth: int) -> None:
    """Every number under ``node`` finite; every list and mapping of bounded size and depth."""
    if isinstance(node, float) and not math.isfinite(node):
        raise SchemaError(f"{name}: {node} is not a finite number")
    if isinstance(node, (list, Mapping)):
        if depth >= MAX_DEPTH:
            raise SchemaError(f"{name}: nested deeper than {MAX_DEPTH} levels")
        if len(node) > MAX_ENTRIES:
            raise SchemaError(f"{name}: {len(node):,} entries (at most {MAX_ENTRIES:,})")
        items = node.items() if isinstance(node, Mapping) else enumerate(node)
        for key, child in items:
            _finite(child, f"{name}.{key}" if isinstance(node, Mapping) else f"{name}[{key}]", depth + 1)
