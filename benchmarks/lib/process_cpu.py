"""CPU-seconds (user + system) of a command and every process it starts, plus processes running beside it.

What a cluster multiplies is the CPU a run costs per MB, not its wall time on one machine: a worker that
imports Beam and compiles its kernels before its first element, or an element pickled across a process
boundary, costs CPU-seconds whatever the core count. The figures:

- the command's tree: ``getrusage(RUSAGE_CHILDREN)`` of this process, before and after. The kernel adds a
  process's user and system time to its parent's when the parent waits for it, so this covers the command and
  every descendant that was waited for (Beam's worker processes are). This process is made a *child
  subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``) so that a descendant whose parent exits first is
  re-parented here, waited for here and counted too, rather than lost to init.
- processes beside it (``also``: a Dask scheduler and its workers, started before the command and living on
  after it): the user + system time of each one's tree, children it has waited for included
  (``/proc/PID/stat`` fields 14-17), after the command minus before it.
"""

from __future__ import annotations

import ctypes
import os
import resource
import time
from collections.abc import Iterable

PR_SET_CHILD_SUBREAPER = 36
TICK = os.sysconf("SC_CLK_TCK")


def become_subreaper() -> bool:
    """Orphaned descendants of this process's children come to this process (Linux >= 3.4); False where not."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children_cpu() -> float:
    """User + system seconds of this process's waited-for descendants so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds of ``pid`` and its waited-for children), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # after the command name: state ppid ... utime (14) stime cutime cstime (17), 1-based over the whole line
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK


def tree_cpu(roots: Iterable[int]) -> float:
    """User + system seconds so far of ``roots`` and all their living descendants (each counting the children
    it has waited for)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, stack, seen = 0.0, list(roots), set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        stack.extend(children.get(pid, ()))
    return total


def reap_orphans(keep: Iterable[int], timeout: float = 30.0) -> int:
    """Wait for this process's children other than ``keep`` (orphans of the finished command, re-parented here
    because this process is a subreaper), so that their CPU time is counted; returns how many. One still
    running after ``timeout`` seconds is killed and counted as it stands."""
    keep = set(keep)
    me, reaped, deadline = os.getpid(), 0, time.monotonic() + timeout
    while True:
        orphans = [
            int(e)
            for e in os.listdir("/proc")
            if e.isdigit() and int(e) not in keep and (s := _stat(int(e))) is not None and s[0] == me
        ]
        if not orphans:
            return reaped
        for pid in orphans:
            try:
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                elif os.waitpid(pid, os.WNOHANG)[0] == 0:
                    continue
                reaped += 1
            except (ChildProcessError, ProcessLookupError):
                pass
        time.sleep(0.05)
