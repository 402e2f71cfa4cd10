"""When a process starts using the compiled kernels: once it has done a small run's worth of work.

Starting numba costs a process ~0.4 s even with every kernel cached (importing numba ~0.15 s, its first
dispatch ~0.25 s: type registries, cache loading), a quarter of a small pipeline run's wall time. The
pure-Python (or NumPy) paths give byte-identical sentences, instances, masks, MinHash signatures and gathers
(tests pin them together), so which one runs is only a matter of speed. Ski rental: a process runs them until
they have taken ``PYTHON_BUDGET_S``, then the kernels for good. The budget is 1 s rather than numba's 0.4 s start (the
2-competitive choice) because the 10-22 MB runs at dupe 1 spend 0.5-0.8 s there: at 0.4 s they paid numba's
start for little gain and ran 5-10% slower than before the kernels (paired A/B). Tests, demos and such runs
never pay the start; a large run pays at most ~1.4 s extra once per worker process, and its instances then
cost ~8x less.

Once numba is running in the process anyway (a kernel has run, or a fork server started it,
:mod:`bertstream.pipelines.runners.fork_server`), there is no start left to save: the kernels run from the first
unit (a kernel's cached code then loads in milliseconds). Until issue 54 the segmentation scan and the masking
kernel had no switch and started numba in every pretraining run: a 20 KB input then took ~0.5 s and ~90 MB more.

``BERTSTREAM_KERNELS=always`` or ``never`` overrides the choice (tests, benchmarks); it is read at each
call, so Beam worker subprocesses follow the environment they inherit.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TypeVar

PYTHON_BUDGET_S = 1.0
ENV = "BERTSTREAM_KERNELS"

T = TypeVar("T")
_python_seconds = 0.0  # per process: time spent on the pure-Python paths so far


def use_kernels() -> bool:
    """Whether this process's next work unit or batch should run on the compiled kernels."""
    mode = os.environ.get(ENV, "auto")
    if mode == "always":
        return True
    if mode == "never":
        return False
    if mode != "auto":
        raise ValueError(f"{ENV} must be auto, always or never, got {mode!r}")
    return _python_seconds >= PYTHON_BUDGET_S or "numba" in sys.modules


def run(kernel: Callable[..., T], python: Callable[..., T], *args) -> T:
    """``kernel(*args)`` or, while the budget lasts, ``python(*args)`` (the same result), timed against it."""
    global _python_seconds
    if use_kernels():
        return kernel(*args)
    start = time.perf_counter()
    try:
        return python(*args)
    finally:
        _python_seconds += time.perf_counter() - start
