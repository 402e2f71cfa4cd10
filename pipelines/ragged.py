"""Ragged-array helpers shared by the pipeline stages."""

from __future__ import annotations

import numpy as np


def concat_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for each pair, vectorised."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    out_start = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    piece = np.repeat(np.arange(len(starts)), lengths)
    return starts[piece] + (np.arange(total) - out_start[piece])
