"""A run's lock when its process dies where Python cannot act: an abort in native code (a library out of memory:
Rust's allocation failure is ``abort()``), the kernel's OOM killer, SIGKILL. No handler runs then: the process
printed no ``Error:`` line and left its lock and work folder for the next run to take over.

:func:`watched` starts a small watcher process beside the run (a fresh interpreter: never a fork of a process
with threads) that polls the run's pid. Stopped when the run ends its own way, it says nothing; when the run's
process is gone while the lock is still the run's, it prints one ``Error:`` line to the run's standard error and
removes the lock and the run's work folder, unless the folder holds what must be put back (``keep``: the earlier
dataset an ``--overwrite`` run set aside), which it leaves to the next run's take-over of the lock and names.
Linux only (``/proc``): elsewhere nothing is watched, and the next run takes a stale lock over as before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# The watcher: arguments as one JSON list; polls the pid (its start time tells a reused pid apart).
_WATCHER = r"""
import json, os, shutil, sys, time
pid, lock, run_id, work, keep, what, output = json.loads(sys.argv[1])
def start(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # a zombie has ended (its parent, the run's caller, reaps it only once the streams it shares close)
    return None if len(fields) < 20 or fields[0] in "ZXx" else fields[19]
first = start(pid)
while first is not None and start(pid) == first:
    time.sleep(0.2)
try:
    with open(lock) as f:
        mine = json.load(f).get("run_id") == run_id
except (OSError, ValueError):
    mine = False
if mine:
    head = f"Error: {what} (pid {pid}) ended before its run finished: killed, or aborted inside a library (out of memory?)"
    if keep and os.path.exists(keep):
        print(f"{head}; the earlier output is kept in {keep}: the next run on {output} puts it back", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(work))
        except OSError:
            pass
        try:
            os.remove(lock)
        except OSError:
            pass
        print(f"{head}; nothing was written to {output}, its lock and work files removed", file=sys.stderr)
"""


@contextmanager
def watched(lock: str, run_id: str, work: str, keep: str, what: str, output: str) -> Iterator[None]:
    """Watch this process while the block runs (see the module); ``lock`` empty (an object store): no watcher."""
    if not lock or not os.path.isdir("/proc"):
        yield
        return
    args = json.dumps([os.getpid(), lock, run_id, work, keep, what, output])
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHER, args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal's group is the run's to handle, not the watcher's
        )
    except OSError:  # no process to spare: the next run takes a stale lock over, as before
        yield
        return
    try:
        yield
    finally:
        try:
            watcher.send_signal(signal.SIGKILL)
            watcher.wait()
        except OSError:
            pass
