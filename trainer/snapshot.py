"""Checkpoints that do not stop training: the state copied to host memory, then written by a thread.

A BERT-base checkpoint with AdamW is 1.3 GB; written and fsynced in the loop it stopped training 8-11 s on a
network disk. The loop now pays only the copy (:class:`HostCopy`): every tensor of the model and optimizer state
into host buffers that are allocated once and reused (pinned on CUDA, where the copies are queued on the stream
like any kernel and the loop does not even wait for them: the writing thread waits for their event). The copy is
what the writer reads, so training goes on changing its own tensors meanwhile. One write runs at a time
(:class:`Background`): the next checkpoint waits for the last (one copy in memory, never two writes racing for
the disk), and so does the end of the run, in success or on an interruption (SIGTERM, Ctrl-C), so the final
checkpoint is complete before the process exits. The write itself is ``checkpoint.save``'s: into a ``.tmp-*``
folder, fsynced, renamed into place, then the oldest pruned; a process killed mid-write leaves the previous
checkpoint the newest complete one, and pruning never runs before the new one is complete.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


class HostCopy:
    """Host buffers for every tensor of a state (nested dicts and lists, as ``state_dict``s are), one per place
    in the tree, reused by the next copy of the same layout: allocating 1.3 GB (pinned, above all) costs more
    than copying into it. A copy is only valid until the next :meth:`copy`; the caller waits for the write of
    the last one first (:meth:`Background.wait`)."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def copy(self, tree: Any, key: str = "") -> Any:
        """``tree`` with each tensor replaced by its host copy (other leaves deep-copied: a scheduler's or data
        loader's lists change as training goes on too)."""
        if isinstance(tree, torch.Tensor):
            t = tree.detach()
            buf = self._buffers.get(key)
            if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                # pinned: a device-to-host copy that is asynchronous on the stream (pageable memory blocks)
                buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda)
                self._buffers[key] = buf
            buf.copy_(t, non_blocking=t.is_cuda)
            return buf
        if isinstance(tree, dict):
            return {k: self.copy(v, f"{key}/{k}") for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return type(tree)(self.copy(v, f"{key}/{i}") for i, v in enumerate(tree))
        return copy.deepcopy(tree)

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._buffers.values())


def copied_event(device: torch.device) -> Callable[[], None]:
    """What the writing thread calls before it reads a copy made on ``device``: on CUDA, waits for the queued
    copies (an event recorded after them on the current stream); elsewhere the copies are already done."""
    if device.type != "cuda":
        return lambda: None
    event = torch.cuda.Event()
    event.record()
    return event.synchronize


class Background:
    """One checkpoint write at a time in a thread. :meth:`start` runs a write; :meth:`done` tells (without
    waiting) whether it ended; :meth:`wait` waits for it and returns its result, or raises what it raised (a
    ``CheckpointError``: a full disk, NaN weights), once. Use as a context manager around a run: leaving it waits
    for the write in flight (the final checkpoint is complete before the process exits); on an error already
    on its way out, the write's own error is only printed (``report``), the first one is the run's."""

    def __init__(self, report: Callable[[str], None] | None = None) -> None:
        self._thread: threading.Thread | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self._report = report
        self.started_at = 0.0
        self.seconds = 0.0  # how long the last finished write took, from its start
        # A write was started and its outcome not yet agreed: kept by every rank (only rank 0 writes), so that
        # all of them meet to learn it (``checkpoint_writer.CheckpointWriter.poll``).
        self.outstanding = False

    def start(self, write: Callable[[], Any], name: str = "checkpoint-write") -> None:
        if self._thread is not None:
            raise RuntimeError("Background.start: the last write was not waited for")
        self._result, self._error = None, None
        self.started_at = time.monotonic()
        # A daemon: a second Ctrl-C while the run waits for the write ends the process rather than hanging in the
        # interpreter's exit; the write it cuts short leaves a .tmp folder, which the next run removes.
        thread = threading.Thread(target=self._run, args=(write,), name=name, daemon=True)
        thread.start()
        self._thread = thread  # only a started thread is waited for

    def _run(self, write: Callable[[], Any]) -> None:
        try:
            self._result = write()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread, which raises it
            self._error = e
        finally:
            self.seconds = time.monotonic() - self.started_at

    @property
    def pending(self) -> bool:
        """A write was started and not yet waited for (it may have ended)."""
        return self._thread is not None

    def done(self) -> bool:
        """The write started last has ended (or none was started): :meth:`wait` will not block."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> Any:
        """The result of the write in flight (None if none), after waiting for it; its exception raised here."""
        thread, self._thread = self._thread, None
        if thread is None:
            return None
        try:
            thread.join()
        except BaseException:
            self._thread = thread  # interrupted while waiting (Ctrl-C): still in flight, still to be waited for
            raise
        error, self._error = self._error, None
        if error is not None:
            raise error
        return self._result

    def __enter__(self) -> Background:
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, tb: object) -> None:
        if not self.pending:
            return
        if kind is None:
            self.wait()
            return
        try:
            self.wait()
        except Exception as e:  # noqa: BLE001 - the run is already failing with ``value``: say this one, keep that
            if self._report is not None:
                self._report(str(e))


def describe_write(path: Path | None, seconds: float) -> str:
    return f"checkpoint {path} (written in the background in {seconds:.1f} s)"
