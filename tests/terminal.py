"""Run a command with stderr on a pseudo-terminal, as a user's console: what progress displays draw there. A
terminal of 0 columns is what ``script`` and some ``docker exec -t`` give: a pseudo-terminal nobody sized."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO


def _open(columns: int) -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24 if columns else 0, columns, 0, 0))
    return master, slave


@contextmanager
def sized_pty(columns: int) -> Iterator[TextIO]:
    """A terminal of ``columns`` columns to write to, in this process (what is written is discarded)."""
    master, slave = _open(columns)
    with os.fdopen(slave, "w") as term:
        try:
            yield term
        finally:
            os.close(master)


def on_terminal(start: Callable[[int], subprocess.Popen], columns: int = 120, seconds: float = 600) -> tuple[int, str]:
    """``start(fd)`` launches the process with ``stderr=fd`` (a terminal of ``columns`` columns); returns its exit
    code and everything it wrote to the terminal, read until it closed it."""
    master, slave = _open(columns)
    proc = start(slave)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], seconds)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return proc.wait(timeout=seconds), seen.decode(errors="replace")
