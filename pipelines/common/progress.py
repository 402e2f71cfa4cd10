"""Live progress of a local pipeline run: one line the launcher redraws, fed by every worker, and a summary
per stage at the end.

Beam runs the stages in the launcher's own process (the default in-process runner) or in worker processes
(``--direct_num_workers N``), so workers cannot print one shared line. Each worker process adds its counts
(``add``) to a small JSON file of its own in a folder the launcher names in ``BERTSTREAM_PROGRESS_DIR`` (the
environment is what the launcher's in-process workers and the worker processes it starts both see, without
a change to the pipeline graph or its output); the launcher (``Monitor``) sums the files twice a second and
draws the line: redrawn in place on a terminal, a plain line every 10 s otherwise (CI, log files). Stages
count what they finish: ``read`` (files, bytes of input as listed, bytes of text, documents), ``groups``,
``shards``. On other runners
(Dataflow, Flink, Spark: workers on other machines) no folder is named, workers count nothing here, and the
launcher says where progress is shown instead (the runner's UI, Beam metrics under ``bertstream``).

Per-file and per-group lines are details, not progress: ``--verbose``
(``BERTSTREAM_VERBOSE=1``, inherited by worker processes the same way) prints them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import TextIO

ENV_DIR = "BERTSTREAM_PROGRESS_DIR"
ENV_VERBOSE = "BERTSTREAM_VERBOSE"
FLUSH_S = 0.5  # a worker writes its file at most this often, and when a group or shard ends or a read bundle ends

_lock = threading.Lock()
_counts: Counter = Counter()
_times: dict[str, list[float]] = {}  # stage -> [first, last] wall time of its counts in this process
_flushed = [0.0]
_dirty = [False]  # counts added since the last write
_run_folder: list[str | None] = [None]  # the run the counts above belong to (a process may serve several)


def verbose() -> bool:
    return os.environ.get(ENV_VERBOSE, "") not in ("", "0")


def detail(message: str) -> None:
    """A per-file or per-group line: printed with ``--verbose`` only."""
    if verbose():  # a worker process's stderr is its log file: the line goes to the console it came from
        from bertstream.pipelines.common.counters import console
        from bertstream.pipelines.common.redact import redact_text

        print(f"[bertprep] {redact_text(message)}", file=console(), flush=True)


def add(stage: str, *, final: bool = False, **counts: int) -> None:
    """Count finished work of ``stage`` (``read``: files, bytes, documents) in this process; ``final``: the
    end of a rare unit of work (a group, a shard), written out at once. Frequent units (a file range) are
    written at most every ``FLUSH_S`` and by :func:`flush` at the end of their bundle: a write per file was a
    third of a run over 100,000 one-line files."""
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return
    now = time.time()
    with _lock:
        if _run_folder[0] != folder:  # a new run in this process: its counts start from zero
            _run_folder[0] = folder
            _counts.clear()
            _times.clear()
        for name, n in counts.items():
            _counts[f"{stage}.{name}"] += n
        span = _times.setdefault(stage, [now, now])
        span[1] = now
        _dirty[0] = True
        if final or now - _flushed[0] >= FLUSH_S:
            _write(folder, now)


def flush() -> None:
    """Write this process's counts if any are not written yet (the end of a bundle: the launcher's summary
    reads the files once the run is over)."""
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return
    with _lock:
        if _dirty[0] and _run_folder[0] == folder:
            _write(folder, time.time())


def _write(folder: str, now: float) -> None:
    """This process's counts to its file in ``folder`` (the caller holds ``_lock``)."""
    _flushed[0] = now
    _dirty[0] = False
    state = {"counts": dict(_counts), "times": _times}
    path = os.path.join(folder, f"{os.getpid()}.json")
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)  # the launcher never reads half a file
    except OSError:  # the launcher has finished and removed the folder: nothing left to show
        pass


def collect(folder: str) -> tuple[Counter, dict[str, list[float]]]:
    """Every worker's counts summed, and each stage's [first, last] time over all workers."""
    total: Counter = Counter()
    times: dict[str, list[float]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return total, times
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                state = json.load(f)
        except (OSError, ValueError):  # a file being replaced: next time
            continue
        total.update(state["counts"])
        for stage, (first, last) in state["times"].items():
            span = times.setdefault(stage, [first, last])
            span[0], span[1] = min(span[0], first), max(span[1], last)
    return total, times


def clock(seconds: float) -> str:
    s = int(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def line(c: Counter, read_s: float, files: int, input_bytes: int, shards: int, elapsed: float) -> str:
    """``read 45/81 files, 12.3/20.1 MB, 4,567 documents, 3.2 MB/s | groups 2 | shards 1/3 | 0:04``; the rate
    is over the ``read_s`` seconds the read stage has taken so far."""
    mb, total_mb = c["read.bytes"] / 1e6, input_bytes / 1e6
    rate = mb / read_s if read_s > 0 else 0.0
    parts = [
        f"read {c['read.files']}/{files} files, {mb:.1f}/{total_mb:.1f} MB, {c['read.documents']:,} documents, "
        f"{rate:.2f} MB/s"
    ]
    if c["groups.groups"]:
        parts.append(f"groups {c['groups.groups']}")
    if shards:
        parts.append(f"shards {c['shards.shards']}/{shards}")
    return " | ".join(parts) + f" | {clock(elapsed)}"


def stage_summary(c: Counter, times: dict[str, list[float]], started: float) -> list[str]:
    """One line per stage seen: what it did and when (seconds since the run started), e.g.
    ``read: 81 files, 0.9 MB of input (1.6 MB of text), 81 documents, 0.0-2.1 s``."""
    out = []
    what = {
        "read": f"{c['read.files']} files, {c['read.bytes'] / 1e6:.1f} MB of input ({c['read.text'] / 1e6:.1f} MB of "
        f"text), {c['read.documents']:,} documents",
        "groups": f"{c['groups.groups']} groups of documents, {c['groups.units']} work units",
        "shards": f"{c['shards.shards']} shards, {c['shards.instances']:,} instances",
    }
    for stage, text in what.items():
        if stage in times:
            first, last = times[stage]
            out.append(f"{stage}: {text}, {first - started:.1f}-{last - started:.1f} s")
    return out


class Monitor:
    """The launcher's side, around ``pipeline.run()``: names the folder, draws the line, prints the stage
    summary at the end. ``local`` is false on runners whose workers run elsewhere."""

    def __init__(
        self, *, files: int, input_bytes: int, shards: int = 0, local: bool = True, stream: TextIO | None = None
    ) -> None:
        self.files, self.input_bytes, self.shards, self.local = files, input_bytes, shards, local
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self.every_s = 0.5 if self.interactive else 10.0
        self.folder: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False
        self.counts: Counter = Counter()
        self.times: dict[str, list[float]] = {}

    def __enter__(self) -> Monitor:
        self.started = time.time()
        if not self.local:
            self._print("progress: in the runner's UI (Beam metrics, namespace bertstream)")
            return self
        self.folder = tempfile.mkdtemp(prefix="bertprep-progress-")
        self._saved = os.environ.get(ENV_DIR)
        os.environ[ENV_DIR] = self.folder
        self._thread = threading.Thread(target=self._run, name="bertprep-progress", daemon=True)
        self._thread.start()
        return self

    def _print(self, text: str) -> None:
        print(f"[bertprep] {text}", file=self.stream, flush=True)

    def _draw(self, final: bool = False) -> None:
        assert self.folder is not None
        self.counts, self.times = collect(self.folder)
        now = time.time()
        read_end = self.times["read"][1] if self.counts["read.files"] >= self.files and "read" in self.times else now
        text = "[bertprep] " + line(
            self.counts, read_end - self.started, self.files, self.input_bytes, self.shards, now - self.started
        )
        if self.interactive:  # one line, redrawn in place; ends with a newline when the run does
            self.stream.write("\r\x1b[2K" + text + ("\n" if final else ""))
            self.stream.flush()
            self._drawn = not final
        else:
            print(text, file=self.stream, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._draw()

    def __exit__(self, *exc: object) -> None:
        if self.folder is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc[0] is None:
            self._draw(final=True)
            for text in stage_summary(self.counts, self.times, self.started):
                self._print(text)
        elif self._drawn:
            self.stream.write("\n")
        if self._saved is None:
            os.environ.pop(ENV_DIR, None)
        else:
            os.environ[ENV_DIR] = self._saved
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
