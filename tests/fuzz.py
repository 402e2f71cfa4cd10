"""Seeded byte mutations for the fuzz tests of our binary readers (the same cases every run)."""

from __future__ import annotations

import numpy as np


def mutate(data: bytes, seed: int, region: int) -> bytes:
    """``data`` with 1-4 bytes of its first ``region`` bytes replaced (seeded: the same cases every run)."""
    rng = np.random.default_rng(seed)
    out = bytearray(data)
    for at in rng.integers(0, min(region, len(out)), rng.integers(1, 5)):
        out[at] = int(rng.integers(0, 256))
    return bytes(out)
