"""How many intra-op threads a training process computes with (``--threads``; 0: chosen here).

torch's default is one thread per core it sees, blind to the loader's worker processes, which take cores of
their own: with 2 loader workers on 2 cores a tiny model ran 0.57-1.24 steps/s at torch's default and 2.42-2.46 at
one thread (issue 54; ``benchmarks/train_threads.py`` measures it). So the default is the cores this process may
use (its affinity; under ``torchrun`` the node's cores shared by its ``LOCAL_WORLD_SIZE`` ranks) less its loader
workers, at least 1. ``--threads N`` sets it; so does ``OMP_NUM_THREADS``, where the environment sets it and the
flag does not (``make test`` runs with one thread per process so). The run line says which and why.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from bertstream.cli.machine import cores, ranks_on_node


def default_threads(loader_workers: int) -> tuple[int, str]:
    """``(threads, why)`` when neither ``--threads`` nor ``OMP_NUM_THREADS`` says: this rank's share of the
    node's cores less its loader workers, at least 1."""
    ranks = ranks_on_node()
    share = max(1, cores() // ranks)
    per = f"{share} of the node's {cores()} cores for each of {ranks} ranks" if ranks > 1 else f"{share} cores"
    workers = f"{loader_workers} loader worker{'' if loader_workers == 1 else 's'}"
    return max(1, share - loader_workers), f"{per} less {workers}, at least 1"


def choose(requested: int, loader_workers: int) -> tuple[int, str]:
    """``(threads, why)``: ``--threads`` when given (> 0), else ``OMP_NUM_THREADS`` when set to a count, else
    :func:`default_threads`."""
    if requested > 0:
        return requested, "--threads"
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env), "OMP_NUM_THREADS"
    return default_threads(loader_workers)


def apply(run: Any, loader_workers: int) -> str:
    """Set this process's intra-op threads from the run section (``RunConfig``: its ``threads``, read here only);
    the run line's words for them (``threads 1 (2 cores less ...)``)."""
    n, why = choose(run.threads, loader_workers)
    torch.set_num_threads(n)
    return f"threads {n} ({why})"
