"""Stable 64-bit hashing: every random choice derives from the seed and a stable id through these.

``hash64`` names things (documents, runs); ``mix64`` is SplitMix64's finaliser, a bijection on 64-bit
integers with good avalanche, used both on Python ints and, vectorised, on NumPy ``uint64`` arrays
(``mix64_array``, defined in ``bertstream.schemas.hashing`` because the trainer's dynamic masks draw with it too).
"""

from __future__ import annotations

import hashlib

from bertstream.schemas.hashing import GOLDEN, mix64_array, uniform_from  # noqa: F401  (the array forms live in schemas)
from bertstream.schemas.hashing import M1 as _M1
from bertstream.schemas.hashing import M2 as _M2

MASK64 = (1 << 64) - 1


def hash64(*parts: str | int) -> int:
    """A stable 64-bit hash of strings and ints (independent of PYTHONHASHSEED and platform)."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(str(p).encode("utf-8"))
        h.update(b"\x1f")
    return int.from_bytes(h.digest(), "little")


def mix64(x: int) -> int:
    x &= MASK64
    x = ((x ^ (x >> 30)) * _M1) & MASK64
    x = ((x ^ (x >> 27)) * _M2) & MASK64
    return x ^ (x >> 31)


def combine(a: int, b: int) -> int:
    """Hash two 64-bit values into one (order matters)."""
    return mix64((a ^ mix64(b + GOLDEN)) & MASK64)
