"""How many intra-op threads a training process computes with (``--threads``; 0: chosen here).

The default is the cores this process may use (its affinity; under ``torchrun`` the node's cores shared by its
``LOCAL_WORLD_SIZE`` ranks), loader workers or not: the workers sleep while their prefetched batches wait (the
loader runs 10-43x faster than a tiny model needs), so leaving them cores wasted a third of the machine (one
thread on 2 quiet cores: 0.66 of two threads' speed). What made a thread per core collapse beside other work
(issue 54: 0.57-1.24 steps/s against 2.42-2.46 at one thread, at load 3) was OpenMP's long busy-wait, bounded
now before torch loads (:mod:`bertstream.trainer.omp_waits`); ``benchmarks/train_threads.py`` measures both,
quiet and beside a busy loop. ``--threads N`` sets it; so does ``OMP_NUM_THREADS``, where the environment sets it
and the flag does not (``make test`` runs with one thread per process so). The run line says which and why.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from bertstream.cli.machine import cores, ranks_on_node
from bertstream.trainer import omp_waits


def default_threads() -> tuple[int, str]:
    """``(threads, why)`` when neither ``--threads`` nor ``OMP_NUM_THREADS`` says: this rank's share of the
    node's cores, at least 1."""
    ranks = ranks_on_node()
    share = max(1, cores() // ranks)
    return share, (
        f"{share} of the node's {cores()} cores for each of {ranks} ranks" if ranks > 1 else f"{share} cores"
    )


def choose(requested: int) -> tuple[int, str]:
    """``(threads, why)``: ``--threads`` when given (> 0), else ``OMP_NUM_THREADS`` when set to a count, else
    :func:`default_threads`."""
    if requested > 0:
        return requested, "--threads"
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env), "OMP_NUM_THREADS"
    return default_threads()


def apply(run: Any) -> str:
    """Set this process's intra-op threads from the run section (``RunConfig``: its ``threads``, read here only);
    the run line's words for them and for OpenMP's waits (``threads 2 (2 cores), OpenMP spin 5000``)."""
    n, why = choose(run.threads)
    torch.set_num_threads(n)
    return f"threads {n} ({why}), {omp_waits.described()}"
