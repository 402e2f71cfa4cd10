"""The processes a test started, found by their whole command line: ``/proc`` holds it uncut (``ps`` cuts its
lines at 80 columns when its output is not a terminal, so a long checkout path hid the name looked for)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


def child_processes(parent: int, marker: str) -> list[int]:
    """The pids of ``parent``'s children whose command line contains ``marker``, in pid order."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
        if ppid == parent and marker in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def ctrl_c_reaches_it() -> None:
    """A Popen ``preexec_fn``: SIGINT at its default in the child, whatever the test process inherited.

    A process whose parent ignores SIGINT (pytest-xdist workers can, after tests that start runners or
    clusters) starts with it ignored, and Python then installs no KeyboardInterrupt handler: a test's Ctrl-C
    would never arrive. A user's shell starts a foreground command with SIGINT at its default."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


# A hang guard, not a timing: what a test waits for comes at once on a quiet machine and within seconds at load 10
# (2 cores); only a process that is stuck runs into it.
HANG_GUARD_S = 600.0


def wait_until(done, proc=None, seconds: float = HANG_GUARD_S, what: str = "the awaited state") -> None:
    """Poll ``done()`` until it holds; fail when ``proc`` (a Popen) ended first, or after ``seconds`` (a hang)."""
    import time

    deadline = time.monotonic() + seconds
    while not done():
        if proc is not None and proc.poll() is not None:
            said = proc.communicate() if proc.stdout or proc.stderr else ""
            raise AssertionError(f"the process ended (exit {proc.returncode}) before {what}: {said}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {seconds:g} s: a hang")
        time.sleep(0.05)


def ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def run_launch(argv: list[str], *, seconds: float = HANG_GUARD_S, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True)`` of a multi-process launch (torchrun), which on a hang
    fails with where every rank was: after ``seconds`` the launch's processes get SIGUSR1 (the trainer's ranks
    print every thread's stack on it: ``trainer.rank_signals.show_stacks_on_sigusr1``), then SIGKILL, and the
    assertion holds the output's tail. A bare timeout said only 'timed out after 600 seconds'."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        ranks = [pid for pid in session_processes(p.pid) if "bertstream.trainer" in _cmdline(pid)]
        for pid in ranks:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)
        with contextlib.suppress(subprocess.TimeoutExpired):  # the stacks' few lines: then the launch ends
            p.communicate(timeout=5)
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(
            f"{' '.join(argv[:6])} ... hung for {seconds:g} s; its output:\n{out[-4000:]}\n{err[-12000:]}"
        ) from None
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def session_processes(session: int) -> list[int]:
    """The pids of every process in session ``session`` (a launch started with ``start_new_session``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[4]) == session:  # state ppid pgrp session ...
                found.append(int(entry.name))
    return sorted(found)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
