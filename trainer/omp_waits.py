"""How long an idle OpenMP thread of torch's spins before it sleeps: bounded before torch is loaded.

torch's CPU kernels run on GNU OpenMP, whose threads busy-wait at every barrier for up to ``GOMP_SPINCOUNT``
(300,000) iterations before they sleep. On quiet cores that spin is what makes a thread per core the fastest
setting; but where another process holds a core, the spinning threads keep taking it while the thread they wait
for queues behind them: a tiny model on 2 cores with 2 threads ran 10-20 sequences/s beside one busy loop, where
one thread ran 111-120 (issue 54; ``benchmarks/train_threads.py --busy 1``). A brief spin keeps most of the quiet
speed and ends the collapse: with ``SPIN`` iterations, 2 threads on 2 quiet cores ran at 0.94 of torch's own spin
(1,000: 0.86; 10,000: 0.98) and, beside a busy loop, at 0.66 of one thread's speed (1,000: 0.87; 10,000: 0.55)
where torch's spin ran at 0.15 (``docs/benchmarks.md``, "Training threads"). So ``berttrain`` sets
``GOMP_SPINCOUNT=SPIN`` unless the environment sets ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` itself (theirs is kept).

libgomp reads the variable once, when torch loads it: :func:`bound` must run before ``import torch`` (the
``berttrain`` entry point calls it first); in a process that imported torch earlier it changes nothing, and
:func:`described` says what holds. A waiting policy changes no result, only who waits how.
"""

from __future__ import annotations

import os
import sys

SPIN = 5000
_OWN = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # a user's own setting of the waits, kept as it is
_bounded_here = False


def bound() -> None:
    """Set ``GOMP_SPINCOUNT=SPIN`` for this process and its children, unless the environment sets the waits or
    torch (with its OpenMP) is loaded already."""
    global _bounded_here
    if "torch" in sys.modules or any(name in os.environ for name in _OWN):
        return
    os.environ["GOMP_SPINCOUNT"] = str(SPIN)
    _bounded_here = True


def described() -> str:
    """The run line's words for the waits: ``OpenMP spin 5000`` (set here), the environment's own, or torch's."""
    if _bounded_here:
        return f"OpenMP spin {SPIN}"
    own = [f"{name}={os.environ[name]}" for name in _OWN if name in os.environ]
    return ", ".join(own) if own else "torch's OpenMP spin"
