"""``bertstream.schemas.hashing``'s SplitMix64 functions on uint64 scalars inside kernels (the same results).

Python ints and NumPy arrays wrap differently; in numba every operand must be uint64 (``uint64 op int64``
is float64 there), so the constants are typed once here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bertstream.schemas.hashing import GOLDEN
from bertstream.schemas.hashing import M1 as _M1
from bertstream.schemas.hashing import M2 as _M2

_U64 = np.uint64
M1 = _U64(_M1)
M2 = _U64(_M2)
G = _U64(GOLDEN)


@njit(cache=True)
def mix64(x: np.uint64) -> np.uint64:
    x = (x ^ (x >> _U64(30))) * M1
    x = (x ^ (x >> _U64(27))) * M2
    return x ^ (x >> _U64(31))


@njit(cache=True)
def combine(a: np.uint64, b: np.uint64) -> np.uint64:
    """:func:`bertstream.schemas.hashing.combine` (uint64 arithmetic wraps modulo 2**64 as the Python masks do)."""
    return mix64(a ^ mix64(b + G))


@njit(cache=True)
def uniform(bits: np.uint64) -> float:
    """:func:`bertstream.schemas.hashing.uniform_from` of one value."""
    return float(bits >> _U64(11)) * (1.0 / 9007199254740992.0)
