"""The machine's size, for the ceilings of the counts a user gives that become processes or threads.

A count past the machine forks until memory runs out (``--num-workers 100000`` started 968 processes and took
15 GB in 30 s on a shared machine before it failed); each such flag is refused above its ceiling in one line
naming the flag, the value and the ceiling. The ceiling is a small multiple of the cores this process may use
(its CPU affinity, which a scheduler's or container's limit sets): more workers than that only queue for the
same cores, while a demanding run (a 256-core box, loader workers waiting on remote shards) still gets twice its
cores. The ceiling is the node's: where several processes on one node each start that many workers (the ranks
``torchrun`` starts per node, ``LOCAL_WORLD_SIZE``), each gets its share of it.
"""

from __future__ import annotations

import os

from bertstream.cli.errors import check

PROCESSES_PER_CORE = 2
MIN_PROCESS_CEILING = 4  # a one- or two-core machine may still run a few workers


def cores() -> int:
    """The cores this process may run on (its affinity where the system has one, else all of the machine's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def process_ceiling() -> int:
    """The most worker processes (or threads) one command starts here: twice the cores, at least 4."""
    return max(MIN_PROCESS_CEILING, PROCESSES_PER_CORE * cores())


def ranks_on_node() -> int:
    """How many ranks of this launch run on this node (``torchrun`` sets ``LOCAL_WORLD_SIZE``; 1 without it)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:  # not torchrun's: the launch itself reports a bad environment
        return 1


def check_processes(param: str, value: int, spelled: str | None = None, *, per_rank: bool = False) -> None:
    """Refuse ``value`` workers above :func:`process_ceiling`, in one line naming the value (as ``spelled``,
    when the flag's own spelling must show: Beam's options), the ceiling and the machine. ``per_rank``: every
    rank on this node starts ``value`` workers, so each may start its share of the node's ceiling (at least 1)."""
    ceiling = process_ceiling()
    ranks = ranks_on_node() if per_rank else 1
    if ranks > 1:
        share = max(1, ceiling // ranks)
        check(
            value <= share,
            param,
            f"{spelled or value} is more than this machine runs: at most {share} per rank ({ranks} ranks on this "
            f"node share {ceiling}: {PROCESSES_PER_CORE} per core, {cores()} cores)",
        )
        return
    check(
        value <= ceiling,
        param,
        f"{spelled or value} is more than this machine runs: at most {ceiling} ({PROCESSES_PER_CORE} per core, "
        f"{cores()} cores)",
    )
