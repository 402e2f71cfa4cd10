"""Counter-based 64-bit hashing on NumPy arrays, shared by the pipelines' static masks and the trainer's
dynamic ones (and anything else that must draw per element, independent of batching and worker count).

``mix64_array`` is SplitMix64's finaliser, a bijection on 64-bit integers with good avalanche; NumPy's
uint64 arithmetic wraps modulo 2**64, which is exactly what it needs. ``mix64_array(key + i * GOLDEN)`` is
the i-th output of a SplitMix64 generator seeded with ``key``: a counter-based generator, so any draw is
computed directly from its (key, counter), vectorised over arrays of both.
"""

from __future__ import annotations

import numpy as np

M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
GOLDEN = 0x9E3779B97F4A7C15


def mix64_array(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise; ``x`` is cast to uint64."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(M1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(M2)
    return x ^ (x >> np.uint64(31))


def uniform_from(bits: np.ndarray) -> np.ndarray:
    """uint64 hash values -> floats uniform in [0, 1) (53 bits)."""
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
