"""What every DataLoader worker process of the trainer sets up first."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from types import TracebackType

# Connection errors that mean the main process closed its end of a hand-off while it stopped the workers.
_PEER_GONE = (ConnectionResetError, BrokenPipeError, EOFError)


def _from_resource_sharer(tb: TracebackType | None) -> bool:
    return any(frame.filename.endswith("resource_sharer.py") for frame in traceback.extract_tb(tb))


def _sigterm_from_parent_only() -> None:
    """torchrun, Slurm's scancel and ``kill -TERM -PGID`` signal the whole process group: a worker that died of
    it made the main process report "a data-loader worker died ... out of memory" (exit 1) instead of its own
    SIGTERM (exit 143). The main process alone decides: a worker ends on the SIGTERM its parent sends as it stops
    its workers (what torch's own handler does), and ignores anyone else's (torch's worker loop ignores SIGINT
    for the same reason); a worker whose parent is gone ends by itself. The sender is only known to
    ``sigwaitinfo``: SIGTERM is blocked and a thread waits for it."""
    parent = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait() -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
                os._exit(0)

    threading.Thread(target=wait, name="sigterm-from-parent", daemon=True).start()


def quiet_worker_init(_worker_id: int) -> None:
    """``worker_init_fn``, run in each loader worker process: SIGTERM from its parent only, and the main process's
    leaving not printed as the worker's traceback. Never call it in a process that starts others: the blocked
    SIGTERM is inherited by every child (a test that called it in pytest's process left every trainer it
    started deaf to SIGTERM)."""
    _sigterm_from_parent_only()
    quiet_resource_sharer()


def quiet_resource_sharer() -> None:
    """A worker hands its batches' tensors to the main process through multiprocessing's resource sharer, a
    thread that reports a failed hand-off with ``sys.excepthook``, traceback and all. When the main process stops
    (Ctrl-C, SIGTERM, an error) it drops those connections mid-hand-off, and the worker printed a
    ``ConnectionResetError`` traceback after the run's one ``Error:`` line. That is the main process leaving, not
    a failure of the worker: it is not printed. Anything else still reaches the previous hook."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, _PEER_GONE) and _from_resource_sharer(tb):
            return
        previous(kind, value, tb)

    sys.excepthook = hook
