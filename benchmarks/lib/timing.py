"""The best of several timed calls: what a benchmark reports, so that a busy machine's slow runs drop out."""

from __future__ import annotations

import time
from collections.abc import Callable


def timed(fn: Callable[[], object], runs: int = 3) -> float:
    """The fewest seconds one of ``runs`` calls of ``fn`` took."""
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
