"""Stable 64-bit hashing, shared by the pipelines (document and run names, groups, static masks) and the trainer
(dynamic masks): every random choice derives from the seed and a stable id through these, independent of
batching, worker count, ``PYTHONHASHSEED`` and platform.

``hash64`` names things (documents, runs); ``mix64`` is SplitMix64's finaliser on Python ints and ``combine``
hashes two values into one; the counter-based forms below work on NumPy arrays.

``mix64_array`` is SplitMix64's finaliser, a bijection on 64-bit integers with good avalanche; NumPy's
uint64 arithmetic wraps modulo 2**64, which is exactly what it needs. ``mix64_array(key + i * GOLDEN)`` is
the i-th output of a SplitMix64 generator seeded with ``key``: a counter-based generator, so any draw is
computed directly from its (key, counter), vectorised over arrays of both.
"""

from __future__ import annotations

import hashlib

import numpy as np

M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
GOLDEN = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1


def hash64(*parts: str | int) -> int:
    """A stable 64-bit hash of strings and ints (independent of PYTHONHASHSEED and platform)."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(str(p).encode("utf-8"))
        h.update(b"\x1f")
    return int.from_bytes(h.digest(), "little")


def mix64(x: int) -> int:
    """SplitMix64's finaliser on a Python int (``mix64_array`` elementwise)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * M1) & MASK64
    x = ((x ^ (x >> 27)) * M2) & MASK64
    return x ^ (x >> 31)


def combine(a: int, b: int) -> int:
    """Hash two 64-bit values into one (order matters)."""
    return mix64((a ^ mix64(b + GOLDEN)) & MASK64)


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
