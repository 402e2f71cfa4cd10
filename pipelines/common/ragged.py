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


# Output elements gathered per step by take_ranges: bounds its int64 index to a few MB whatever the input.
TAKE_CHUNK = 1 << 20


def take_ranges(values: np.ndarray, starts: np.ndarray, ends: np.ndarray, chunk: int = TAKE_CHUNK) -> np.ndarray:
    """``values[concat_ranges(starts, ends)]`` without a token-sized index: the ranges are gathered in
    steps of about ``chunk`` output elements (an int64 index per output element, twice, would be eight to
    sixteen times the size of uint16 ids)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    lengths = ends - starts
    total = int(lengths.sum())
    if total <= chunk:
        return values[concat_ranges(starts, ends)]
    out = np.empty(total, dtype=values.dtype)
    cum = np.cumsum(lengths)
    # Range boundaries where the output crosses each multiple of ``chunk``.
    cuts = np.unique(np.concatenate(([0], np.searchsorted(cum, np.arange(chunk, total, chunk)), [len(lengths)])))
    at = 0
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        part = values[concat_ranges(starts[a:b], ends[a:b])]
        out[at : at + len(part)] = part
        at += len(part)
    return out
