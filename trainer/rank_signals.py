"""A rank's signals under a distributed launch: SIGTERM ends it even while it waits in a collective, and SIGUSR1
prints where its threads are."""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

# A SIGTERM that the main thread has not turned into ``Terminated`` after this many seconds finds it blocked in a
# collective (or in another call that does not return to Python): the process then ends without it.
SIGTERM_GRACE_S = 5.0
_delivered = threading.Event()


def watch_sigterm() -> None:
    """Make SIGTERM end this rank even while it waits in a collective: the Python handler only runs when the
    call returns, which a silent peer delays by the whole timeout (``timeout 60`` ran 10 minutes until SIGKILL).
    The C-level handler still writes the signal's number to a wake-up socket; a thread reading it gives the main
    thread :data:`SIGTERM_GRACE_S` to start its own cleanup, else prints the interrupted line and exits 143 (the
    next run removes a partial checkpoint, and takes over the lock of a pid that is gone)."""
    if threading.current_thread() is not threading.main_thread():
        return  # a test's runner thread: signals are the main thread's
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        _delivered.set()
        if callable(previous):
            previous(signum, frame)
        else:
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    signal.set_wakeup_fd(theirs.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_end_on_sigterm, args=(ours, theirs), name="sigterm-watch", daemon=True).start()


def _end_on_sigterm(ours: socket.socket, theirs: socket.socket) -> None:
    from bertstream.cli.errors import Terminated, interrupted_line

    while True:  # every signal's number arrives here (SIGCHLD from loader workers too)
        got = ours.recv(64)
        if not got:
            return
        if signal.SIGTERM in got:
            break
    deadline = time.monotonic() + SIGTERM_GRACE_S
    while not _delivered.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    if _delivered.is_set():
        return  # the main thread handles it: its cleanup and its one line
    line, code = interrupted_line(
        Terminated(), "ended while waiting for a peer rank (the last complete checkpoint is kept)"
    )
    print(line, file=sys.stderr, flush=True)
    os._exit(code)


def show_stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` prints where every thread of this rank is (a rank that waits, and on what), and the
    rank goes on. Registered for distributed runs, where a rank can wait on another."""
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        faulthandler.register(signal.SIGUSR1, all_threads=True)
