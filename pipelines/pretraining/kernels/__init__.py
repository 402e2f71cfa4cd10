"""Compiled (numba) kernels of the hot per-instance loops: instance creation, assembly and masking.

Each kernel has a readable pure-Python or NumPy reference (beside its caller, ``bertstream.pipelines.pretraining.instances``;
for masking, the contract's rule, ``bertstream.schemas.masking``) and a test that pins the kernel to it. This package is imported lazily, on a
pipeline's first work unit or batch: importing numba costs ~0.2 s, which processes that only read,
tokenize or write should not pay. Kernels are compiled with ``cache=True``, so a process compiles a kernel
only when no process on the machine has compiled it before (Beam worker subprocesses load the cache).
"""

from __future__ import annotations

import numpy as np


def readonly(a: np.ndarray, dtype: np.dtype | type | str | None = None) -> np.ndarray:
    """``a`` as a read-only C-contiguous view (copied only to change its dtype or layout).

    numba compiles one specialisation for writable and another for read-only arrays. Kernels get only
    read-only ones, so each compiles once (~2-5 s, then cached) whether its input was decoded from bytes
    (read-only buffers: pool files, Beam elements) or built in memory (tests).
    """
    v = np.ascontiguousarray(a, dtype=dtype).view()
    v.flags.writeable = False
    return v
