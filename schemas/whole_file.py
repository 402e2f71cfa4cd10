"""Reading a small file whole (a vocabulary, a manifest, a model or run config, a lock), for both sides: one
capped reader, so that no command hangs on a FIFO or reads ``/dev/zero`` or an 8 GB file given in its place
until memory runs out (a MemoryError, or the machine's swap).

A local path must be a regular file: it is opened without blocking (a FIFO without a writer would block
``open`` itself) and its kind checked on the open descriptor. At most ``MAX_WHOLE_FILE_BYTES`` are read.
A path of another filesystem (a URL) is read through the caller's ``opener`` under the same cap.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import IO

# A file a command reads whole, a vocabulary or a manifest: generous (BERT's vocabularies are under 1 MB, a
# manifest of 100,000 inputs about 10 MB) and, as the record cap of the input readers, 64 MiB.
MAX_WHOLE_FILE_BYTES = 64 << 20


class WholeFileError(ValueError):
    """A file read whole is not a regular file, or holds more than the cap: the message names it."""


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, in words (from its ``os.stat`` mode)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_whole(
    path: str | os.PathLike[str],
    what: str,
    *,
    opener: Callable[[], IO[bytes]] | None = None,
    cap: int | None = None,
) -> bytes:
    """The bytes of a file read whole, bounded: a local one (``opener`` None) must be a regular file, and any
    holds at most ``cap`` bytes (``MAX_WHOLE_FILE_BYTES`` when None); else ``WholeFileError`` naming ``what`` and ``path``. A missing file raises
    ``FileNotFoundError`` (the callers say what it should have been); ``opener`` opens a URL's file."""
    name = os.fspath(path)
    cap = MAX_WHOLE_FILE_BYTES if cap is None else cap
    if opener is not None:
        with opener() as f:
            data = f.read(cap + 1)
    else:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, and is refused below
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise WholeFileError(f"{what} {name} is {file_kind(mode)}, not a regular file")
        with os.fdopen(fd, "rb") as f:
            data = f.read(cap + 1)
    if len(data) > cap:
        raise WholeFileError(
            f"{what} {name} holds more than {cap} bytes, the cap on a file read whole (MAX_WHOLE_FILE_BYTES): "
            "is it what it says it is?"
        )
    return data
