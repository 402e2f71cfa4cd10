"""Run a command with stderr on a pseudo-terminal, as a user's console: what progress displays draw there."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
from collections.abc import Callable


def on_terminal(start: Callable[[int], subprocess.Popen], columns: int = 120, seconds: float = 600) -> tuple[int, str]:
    """``start(fd)`` launches the process with ``stderr=fd`` (a terminal of ``columns`` columns); returns its exit
    code and everything it wrote to the terminal, read until it closed it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
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
