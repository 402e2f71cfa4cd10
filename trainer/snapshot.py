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
import queue
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


class _Write:
    """One write handed to the worker: its function, then its result or error, how long it took, and when it
    ended (all set before ``ended``, which the main thread waits for)."""

    def __init__(self, write: Callable[[], Any]) -> None:
        self.write = write
        self.result: Any = None
        self.error: BaseException | None = None
        self.handed = time.monotonic()
        self.seconds = 0.0  # from the hand-over to its end
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            self.result = self.write()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread, which raises it
            self.error = e
        finally:
            self.seconds = time.monotonic() - self.handed
            self.ended.set()


class Background:
    """One checkpoint write at a time, in a worker thread. :meth:`start` hands a write over; :meth:`done` tells
    (without waiting) whether it ended; :meth:`wait` waits for it and returns its result, or raises what it
    raised (a ``CheckpointError``: a full disk, NaN weights), once. Use as a context manager around a run:
    leaving it waits for every write handed over (the final checkpoint is complete before the process exits);
    on an error already on its way out, the write's own error is only printed (``report``), the first one is
    the run's.

    A write is handed over through a queue whose ``put`` is one C call: a Ctrl-C arrives before it (nothing was
    handed over) or after it (the worker runs the write), never half-way, and leaving waits for what the worker
    holds, not for what this object recorded. A thread started per write could not promise that: a Ctrl-C
    inside ``Thread.start`` (its wait for the new thread to run) left a write running that nothing waited for,
    and the process exited half-way through it, a ``.tmp`` folder left where the run said none was."""

    def __init__(self, report: Callable[[str], None] | None = None) -> None:
        self._jobs: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._write: _Write | None = None  # the write started last, until waited for
        self._report = report
        self.seconds = 0.0  # how long the last finished write took, from its start
        # A write was started and its outcome not yet agreed: kept by every rank (only rank 0 writes), so that
        # all of them meet to learn it (``checkpoint_writer.CheckpointWriter.poll``).
        self.outstanding = False

    def start(self, write: Callable[[], Any], name: str = "checkpoint-write") -> None:
        if self._write is not None:
            raise RuntimeError("Background.start: the last write was not waited for")
        if self._worker is None:
            # A daemon: a second Ctrl-C while the run waits for the write ends the process rather than hanging in
            # the interpreter's exit; the write it cuts short leaves a .tmp folder, which the next run removes.
            # An interrupt inside start() hands no write over: there is then nothing to wait for.
            worker = threading.Thread(target=self._serve, name=name, daemon=True)
            worker.start()
            self._worker = worker
        job = _Write(write)
        self._jobs.put(job)  # handed over: the worker runs it, whatever interrupts this thread from here on
        self._write = job

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()

    @property
    def pending(self) -> bool:
        """A write was started and not yet waited for (it may have ended)."""
        return self._write is not None

    def done(self) -> bool:
        """The write started last has ended (or none was started): :meth:`wait` will not block."""
        return self._write is None or self._write.ended.is_set()

    def wait(self) -> Any:
        """The result of the write in flight (None if none), after waiting for it; its exception raised here."""
        job, self._write = self._write, None
        if job is None:
            return None
        try:
            job.ended.wait()
        except BaseException:
            self._write = job  # interrupted while waiting (Ctrl-C): still in flight, still to be waited for
            raise
        self.seconds = job.seconds
        if job.error is not None:
            raise job.error
        return job.result

    def _drain(self) -> None:
        """Wait for every write handed over (one that an interrupt kept from being recorded too), then end the
        worker: a marker queued behind them ends when they have."""
        if self._worker is None:
            return  # never started: no write was handed over
        marker = _Write(lambda: None)
        self._jobs.put(marker)
        marker.ended.wait()
        self._jobs.put(None)
        self._worker = None

    def __enter__(self) -> Background:
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, tb: object) -> None:
        if kind is None:
            try:
                self.wait()
            finally:
                self._drain()
            return
        try:
            self.wait()
        except Exception as e:  # noqa: BLE001 - the run is already failing with ``value``: say this one, keep that
            if self._report is not None:
                self._report(str(e))
        self._drain()


def describe_write(path: Path | None, seconds: float) -> str:
    return f"checkpoint {path} (written in the background in {seconds:.1f} s)"
