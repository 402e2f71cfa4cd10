"""One run per ``--output`` at a time: a lock file created atomically in the folder, removed at the end.

Two runs into one folder would each publish a manifest over the other's shards. The lock is
``OUTPUT/.bertprep.lock``, written whole to a temporary name and hard-linked into place (``link`` fails
when the name exists, on every local and network filesystem), holding the run's id, pid, host and start.
A lock whose process is gone (same host, no such pid) is stale, from a run that was killed: it is taken
over, and said so. Object stores have no atomic create-if-absent through Beam's filesystems: runs into a
URL are not locked (the README says so).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass

from bertstream.pipelines.common.runner import UsageError

LOCK_NAME = ".bertprep.lock"


def new_run_id() -> str:
    """``20260101T120000-4242-1a2b3c``: unique per run, sortable by start; names the run's work files."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


@dataclass(frozen=True, slots=True)
class OutputLock:
    """The lock of one run on one folder (``path`` empty: not locked, a URL)."""

    path: str
    run_id: str

    def release(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                mine = json.load(f).get("run_id") == self.run_id
        except (OSError, ValueError):
            return
        if mine:  # never remove a lock another run took over
            os.remove(self.path)

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_output(output_dir: str, run_id: str, command: str) -> OutputLock:
    """Take ``output_dir``'s lock for this run, or raise ``UsageError`` naming the run that holds it."""
    if "://" in output_dir:
        return OutputLock("", run_id)
    path = os.path.join(output_dir, LOCK_NAME)
    me = {
        "run_id": run_id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    tmp = f"{path}.{run_id}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(me, f)
    try:
        for _ in range(3):
            try:
                os.link(tmp, path)
                return OutputLock(path, run_id)
            except FileExistsError:
                holder = _read(path)
                if holder is None:
                    continue  # removed meanwhile: try again
                if holder.get("host") == me["host"] and not _alive(int(holder.get("pid", 0))):
                    from bertstream.pipelines.common import counters as C

                    C.progress(
                        f"removing the stale lock of run {holder.get('run_id')} (pid {holder.get('pid')} is gone)"
                    )
                    _remove_if(path, holder)
                    continue
                raise UsageError(
                    "output",
                    f"{output_dir} is being written by another run ({holder.get('command', 'bertprep')}, pid "
                    f"{holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}); wait for it "
                    f"to end, or remove {path} if that run is gone",
                ) from None
        raise UsageError("output", f"cannot take the lock {path}: it keeps changing (another run is starting?)")
    finally:
        os.remove(tmp)


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: held by someone we cannot name


def _remove_if(path: str, holder: dict) -> None:
    """Remove the stale lock unless another run replaced it since it was read."""
    if _read(path) == holder:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
