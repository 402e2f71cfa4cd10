"""Checks of untrusted fields and paths: what a manifest, a shard's metadata or a checkpoint's JSON holds.

Every reader of a bertstream file gets its values through these, so a tampered or foreign file fails with one
line naming the field (``vocab.size``, ``shards[3].count``), never with a traceback or, worse, silently: JSON
allows ``true`` where an integer belongs (Python's bool is an int), ``"64"`` where a number belongs and
``1e400`` (infinity) anywhere. Paths a file names are joined to the folder that holds it, so they must stay
inside it: relative, no ``..``, no drive or URL, and, on a local disk, no link out of the folder nor anything
but a regular file (a FIFO or ``/dev/zero`` would block or fill memory).
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

from bertstream.schemas.version import SchemaError

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
# Sizes no real file reaches: a petabyte, and 2**48 rows. They keep sums and allocations that follow a
# count (an index of 10**30 rows) out of reach of a tampered file.
MAX_BYTES = 1 << 50
MAX_COUNT = 1 << 48


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return "a string" if isinstance(value, str) else "null" if value is None else f"a {type(value).__name__}"


def integer(value: Any, name: str, lo: int, hi: int) -> int:
    """``value`` if it is an integer (not a bool, not a float, not a string) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"{name}: expected an integer, got {_show(value)} ({_kind(value)})")
    if not lo <= value <= hi:
        raise SchemaError(f"{name}: {_show(value)} is outside {lo}..{hi}")
    return value


def number(value: Any, name: str, lo: float, hi: float) -> float:
    """``value`` if it is a finite number (an integer or a float, not a bool) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{name}: expected a number, got {_show(value)} ({_kind(value)})")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise SchemaError(f"{name}: {_show(value)} is outside {lo}..{hi}")
    return float(value)


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise SchemaError(f"{name}: expected true or false, got {_show(value)} ({_kind(value)})")
    return value


def string(value: Any, name: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
        raise SchemaError(f"{name}: expected a string, got {_show(value)} ({_kind(value)})")
    if choices is not None and value not in choices:
        raise SchemaError(f"{name}: {_show(value)} is not one of {', '.join(choices)}")
    return value


def sha256_hex(value: Any, name: str) -> str:
    if not isinstance(value, str) or not _HEX64.match(value):
        raise SchemaError(f"{name}: {_show(value)} is not a sha256 (64 lower-case hex digits)")
    return value


def mapping(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError(f"{name}: expected an object, got {_show(value)} ({_kind(value)})")
    return value


def array(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise SchemaError(f"{name}: expected a list, got {_show(value)} ({_kind(value)})")
    return value


def member(data: Mapping[str, Any], key: str, prefix: str = "") -> Any:
    """``data[key]``, or a SchemaError naming the missing field."""
    if key not in data:
        raise SchemaError(f"{prefix}{key}: missing")
    return data[key]


def relative_path(value: Any, name: str) -> str:
    """A path inside the folder that names it: relative, without ``..``, a drive, a URL or a NUL."""
    path = string(value, name)
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith(("/", "\\", "~")) or ":" in path or "\0" in path or ".." in parts:
        raise SchemaError(f"{name}: {_show(path)} leaves the dataset folder (must be relative, without '..')")
    return path


def local_member(root: str, relpath: str, name: str | None = None) -> str:
    """The local path of ``relpath`` inside the folder ``root``, once it is known to stay there.

    ``relpath`` passes :func:`relative_path`; links are resolved, and the file they reach must lie inside
    ``root`` (resolved too) and, where it exists, be a regular file: a link to ``/etc/passwd`` or a device
    is refused. A path that does not exist is returned as it is (the caller reports it missing).
    """
    what = name or os.path.join(root, relpath)
    relative_path(relpath, what)
    path = os.path.join(root, relpath)
    base = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise SchemaError(f"{what}: a link out of the dataset folder (to {real})")
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return path
    except OSError as e:
        raise SchemaError(f"{what}: cannot be read ({type(e).__name__}: {e})") from None
    if not stat.S_ISREG(mode):
        raise SchemaError(f"{what}: not a regular file")
    return path
