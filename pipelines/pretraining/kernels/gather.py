"""Ragged gathers of the shuffle and write stage: rows of an instance batch copied range by range.

:meth:`bertstream.pipelines.common.batch.InstanceBatch.take` builds an int64 index per token (a cumulative
sum, then NumPy's fancy indexing): at dupe 10 that was a third of the shuffle-and-write stage's time. Here each
row is one slice copy, with no index at all; the result is the same array (``tests/pipelines/pretraining/
test_write.py`` pins it).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)  # the shard writer's thread runs beside it
def take_ranges(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``values[s:e]`` for each ``(s, e)``, back to back. The caller checks that the ranges lie in ``values``."""
    total = 0
    for i in range(len(starts)):
        total += ends[i] - starts[i]
    out = np.empty(total, dtype=values.dtype)
    at = 0
    for i in range(len(starts)):
        s, e = starts[i], ends[i]
        out[at : at + e - s] = values[s:e]
        at += e - s
    return out
