"""One run per folder at a time, for both command lines: ``bertprep``'s ``--output`` (``.bertprep.lock``) and
``berttrain``'s run folder (``.berttrain.lock``).

The lock file is written whole to a temporary name and hard-linked into place (``link`` fails when the name
exists, on every local and network filesystem), holding the run's id, pid, host, command and start. A lock
whose process is gone (same host, no such pid) is stale, from a run that was killed: it is taken over, and
said so. Object stores have no atomic create-if-absent: folders given as URLs are not locked.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

from bertstream.cli.errors import UsageError


@dataclass(frozen=True, slots=True)
class FolderLock:
    """The lock of one run on one folder (``path`` empty: not locked, a URL)."""

    path: str
    run_id: str

    def release(self) -> None:
        if not self.path:
            return
        mine = (read_lock(self.path) or {}).get("run_id") == self.run_id
        if mine:  # never remove a lock another run took over
            os.remove(self.path)

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_file_name(file_name: str, name: str) -> bool:
    """Whether ``file_name`` in a folder is its lock ``name``, or that lock being taken by a run
    (``name.RUN.tmp``, written before it is linked to ``name``): neither is a run's content."""
    return file_name == name or (file_name.startswith(name + ".") and file_name.endswith(".tmp"))


def lock_folder(
    folder: str,
    name: str,
    run_id: str,
    command: str,
    *,
    say: Callable[[str], None],
    param: str = "output",
    launch: tuple[str, int] | None = None,
) -> FolderLock:
    """Take ``folder``'s lock ``name`` for this run, or raise ``UsageError`` on ``param`` naming the run that
    holds it; ``say`` reports a stale lock taken over. The folder must exist.

    ``launch``: (the launch's id, its restart count) under an elastic launcher. A lock of the same launch at
    an earlier restart belongs to this run's previous incarnation, which the launcher ended on every node before
    restarting it: it is taken over wherever it was held (rank 0 may move to another host), where a lock of
    another host could otherwise not be checked and was refused until someone removed it."""
    if "://" in folder:
        return FolderLock("", run_id)
    path = os.path.join(folder, name)
    me = {
        "run_id": run_id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    if launch is not None:
        me["launch"], me["restart"] = launch
    tmp = f"{path}.{run_id}.tmp"  # see lock_file_name
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(me, f)
    try:
        for _ in range(3):
            try:
                os.link(tmp, path)
                return FolderLock(path, run_id)
            except FileExistsError:
                _refuse_odd_file(path, param)
                holder = read_lock(path)
                if holder is None:
                    continue  # removed meanwhile: try again
                if holder.get("host") == me["host"] and not pid_alive(_pid(holder)):
                    say(f"removing the stale lock of run {holder.get('run_id')} (pid {holder.get('pid')} is gone)")
                    _remove_lock_if(path, holder)
                    continue
                if launch is not None and _earlier_restart(holder, launch):
                    say(
                        f"taking over the lock of launch {launch[0]} from its restart {holder.get('restart')} on "
                        f"{holder.get('host')} (this is restart {launch[1]})"
                    )
                    _remove_lock_if(path, holder)
                    continue
                raise UsageError(
                    param,
                    f"{folder} is being written by another run ({holder.get('command', 'another command')}, pid "
                    f"{holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}); wait for it "
                    f"to end, or remove {path} if that run is gone",
                ) from None
        raise UsageError(param, f"cannot take the lock {path}: it keeps changing (another run is starting?)")
    finally:
        os.remove(tmp)


def _earlier_restart(holder: dict, launch: tuple[str, int]) -> bool:
    restart = holder.get("restart")
    return (
        holder.get("launch") == launch[0]
        and isinstance(restart, int)
        and not isinstance(restart, bool)
        and restart < launch[1]
    )


def _pid(holder: dict) -> int:
    pid = holder.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else -1


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host may be running (a lock's, a temporary folder's owner)."""
    if pid <= 0:  # an unreadable or edited lock: held by someone we cannot name (kill(0) would hit our group)
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except OverflowError:
        return True
    return True


# A lock holds a few hundred bytes of JSON; more is no lock of ours (an 8 GB file was read whole: MemoryError).
MAX_LOCK_BYTES = 64 << 10


def read_lock(path: str) -> dict | None:
    """The lock's holder; None: no lock; ``{}``: a lock that cannot be read (held by someone we cannot name).
    Read without blocking and bounded: a FIFO there hung ``open`` until someone wrote to it, ``/dev/zero`` or a
    huge file filled memory. (``cli`` imports nothing of ours, so not ``schemas.whole_file``: this reader only
    needs to fail safe, and a lock that is no regular file is refused by name in :func:`lock_folder`.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return {}
            raw = f.read(MAX_LOCK_BYTES + 1)
        value = json.loads(raw) if len(raw) <= MAX_LOCK_BYTES else None
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested past the stack
        return {}


def _refuse_odd_file(path: str, param: str) -> None:
    """A lock path that is no regular file (a FIFO, a device, a folder) holds no run's lock: refused by name,
    never read (a FIFO blocked the run forever) nor removed (it is not ours)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # gone meanwhile, or a link to nothing: read_lock decides
    if not stat.S_ISREG(mode):
        raise UsageError(
            param,
            f"{path} is not a regular file (a FIFO, a device or a folder), so no lock of a run: remove it, or "
            "choose another folder",
        )


def _remove_lock_if(path: str, holder: dict) -> None:
    """Remove the stale lock unless another run replaced it since it was read."""
    if read_lock(path) == holder:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
