"""Ragged-array helpers shared by the pipeline stages."""

from __future__ import annotations

import numpy as np


def concat_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for each pair, vectorised (one cumulative sum).

    Each output step is +1, except at the first element of a range, where it jumps from the previous
    range's last value to this range's start.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    lengths = ends - starts
    keep = lengths > 0
    if not keep.all():
        starts, ends, lengths = starts[keep], ends[keep], lengths[keep]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    steps = np.ones(total, dtype=np.int64)
    first = np.cumsum(lengths)[:-1]
    steps[0] = starts[0]
    steps[first] = starts[1:] - ends[:-1] + 1
    return np.cumsum(steps)
