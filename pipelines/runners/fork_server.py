"""Local worker processes forked from a warm process instead of started cold.

A cold Beam worker process spends ~2.5 CPU-seconds before its first element: importing Beam (~1.5 s) and
starting numba (its import, the type system, the segmentation table and kernel: ~1 s). That is CPU a run pays
once per worker, which the in-process runner pays once in all. So the launcher, once it has imported Beam,
forks a *fork server* (a zygote) that starts numba and loads the segmentation kernel, then waits on a Unix
socket. Beam still starts each worker with our entry point (``bertstream.pipelines.runners.beam_worker``);
that small process, the *client*, hands the server its environment, arguments and standard streams, and the
server forks the worker from its warm state: Beam and numba come with the fork, copy-on-write.

What the client's parent (Beam's ``SubprocessSdkWorker``) sees does not change: the client exits with the
worker's exit code, and if the worker dies without saying (a signal: the kernel's OOM killer, ``kill -9``) the
client dies of SIGKILL, as the worker would have. A worker exits as soon as its client does (Beam kills the
client of a worker it gives up on), and the server exits once it has forked the workers the run asked for,
or with the launcher (``PR_SET_PDEATHSIG``), so it holds no memory through the run.

Nothing runs in the forked processes but the worker: they leave with ``os._exit`` (never the launcher's
``atexit`` handlers, which own the output folder), with the signal handlers a fresh interpreter has. Where
fork or the socket is unavailable, or the server has gone, the client runs the worker itself, as before.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import struct
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable

ENV = "BERTSTREAM_FORK_SERVER"
_PR_SET_PDEATHSIG = 1
_LEN = struct.Struct("<I")
_STATUS = struct.Struct("<i")
_FORKED = b"F"


def _pdeathsig(sig: int) -> None:
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _imports_as_started() -> bool:
    """Whether this process's environment still says what it said when the interpreter started, as far as
    what a worker imports goes (``PYTHON*``, ``LD_*``): a worker forked from here has this process's imports,
    so where those variables have changed since (a test that hides a package from workers, say), a worker
    started cold would import something else."""
    try:
        with open("/proc/self/environ", "rb") as f:
            initial = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return False

    def relevant(env: dict[bytes, bytes]) -> dict[bytes, bytes]:
        return {k: v for k, v in env.items() if k.startswith((b"PYTHON", b"LD_"))}

    return relevant(initial) == relevant(dict(os.environb))


def _alone() -> bool:
    """Whether this process runs no thread that a fork could leave half-way: no Python thread but this one (a
    copy of a lock it holds would never be released), and gRPC not started (a process that has run a pipeline
    before holds gRPC's threads and channels; a worker forked from it connects and then waits forever)."""
    if threading.active_count() > 1:
        return False
    try:
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    except OSError:
        return False
    return not any(n.startswith(("grpc", "event_engine", "lifeguard")) for n in names)


def start(workers: int, warm: Callable[[], None], target: Callable[[], None]) -> tuple[str, int] | None:
    """Fork a server that runs ``warm()`` and then forks up to ``workers`` workers on request, each running
    ``target`` (Beam's worker: the runner passes ``beam_worker.run``, which imports this module); returns its
    socket path and pid. None, and workers start cold as before, where this platform cannot fork, where this
    process runs threads a fork could break (``_alone``: a launcher that runs one pipeline, ``bertprep``, has
    none when it starts it), or where a forked worker would not import what a cold one does
    (``_imports_as_started``)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return None
    if not _alone() or not _imports_as_started():
        return None
    folder = tempfile.mkdtemp(prefix="bertprep-fork-")
    path = os.path.join(folder, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(max(workers, 1))
    launcher = os.getpid()
    pid = os.fork()
    if pid:
        listener.close()
        return path, pid
    code = 0
    try:
        _pdeathsig(signal.SIGKILL)
        if os.getppid() != launcher:  # the launcher died before the line above
            os._exit(0)
        _fresh_process()
        warm()
        _serve(listener, workers, target)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the launcher says it in one line
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            os.unlink(path)
            os.rmdir(folder)
        except OSError:
            pass
        os._exit(code)


def stop(server: tuple[str, int] | None) -> None:
    """End the server (when the run ends before it has forked every worker) and remove its socket."""
    if server is None:
        return
    path, pid = server
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (OSError, ChildProcessError):
        pass
    for p in (path, os.path.dirname(path)):
        try:
            os.unlink(p) if p == path else os.rmdir(p)
        except OSError:
            pass


def _fresh_process() -> None:
    """The handlers of a fresh interpreter: the launcher's (SIGTERM as Ctrl-C, cleanup; background threads'
    exceptions to the run's log) are not the worker's."""
    threading.excepthook = threading.__excepthook__
    # Ctrl-C reaches the whole process group: a worker that took it failed its harness and reported the traceback
    # through Beam's log stream, at times before the launcher's own line (its handler runs between bytecodes). The
    # launcher alone answers it: it stops its workers (and they die with it: PR_SET_PDEATHSIG).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)


def _serve(listener: socket.socket, workers: int, target: Callable[[], None]) -> None:
    """Fork a worker for each of ``workers`` clients; the server's children are reaped by whoever adopts them."""
    for _ in range(workers):
        conn, _ = listener.accept()
        request, fds = _receive(conn)
        if os.fork() == 0:
            listener.close()
            _run_worker(conn, request, fds, target)  # never returns
        conn.close()
        for fd in fds:
            os.close(fd)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, _LEN.size, 3)
    size = _LEN.unpack(head)[0]
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("client left before its request was read")
        data += chunk
    return json.loads(data), list(fds)


def _run_worker(conn: socket.socket, request: dict, fds: list[int], target: Callable[[], None]) -> None:
    """In the forked worker: the client's streams, environment and arguments; Beam's worker; the exit code to
    the client; ``os._exit``."""
    code = 1
    try:
        conn.sendall(_FORKED)  # the client waits for this worker from now on (before: it runs the worker itself)
        for stream, fd in enumerate(fds):  # the client's stdin, stdout, stderr
            os.dup2(fd, stream)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]

        def leave_with_client() -> None:  # the client is gone (killed): so is its worker
            try:
                conn.recv(1)
            finally:
                os._exit(1)

        threading.Thread(target=leave_with_client, name="fork-client", daemon=True).start()
        target()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:  # Ctrl-C to the process group: the launcher's one line says it
        code = 130
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(_STATUS.pack(code))
        except Exception:
            pass
        os._exit(code)


def run_through_server(path: str, argv: list[str]) -> int | None:
    """In the client: have the server at ``path`` fork the worker and wait for it; its exit code, or None when
    the server cannot be reached (the client then runs the worker itself). A worker that dies without an
    exit code (a signal) takes the client with it, by SIGKILL."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except OSError:
        return None
    data = json.dumps({"env": dict(os.environ), "argv": argv}).encode()
    try:
        socket.send_fds(conn, [_LEN.pack(len(data))], [0, 1, 2])
        conn.sendall(data)
        if conn.recv(1) != _FORKED:  # the server failed (its warm-up, say) before it forked a worker for us
            return None
    except OSError:
        return None
    status = b""
    while len(status) < _STATUS.size:
        chunk = conn.recv(_STATUS.size - len(status))
        if not chunk:  # the worker died without a word
            os.kill(os.getpid(), signal.SIGKILL)
        status += chunk
    return _STATUS.unpack(status)[0]
