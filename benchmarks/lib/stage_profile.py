"""Which stage of a pipeline run the time goes to: a sampling profiler that names stages, not functions.

A daemon thread looks at every thread's Python stack every ``interval`` seconds (``sys._current_frames``)
and files each busy thread's sample under the stage of its innermost frame in a pipeline module: ``read``
(byte ranges, line splitting, the format parsers), ``clean`` (UTF-8 decoding and control-character
cleaning), ``segment``, ``tokenize``, ``group``, ``instances``, ``mask``, ``write``, ``finalize``; a busy
stack with no pipeline frame is ``beam`` (the runner: coders, element hand-offs, bundle bookkeeping), or
``beam coders`` when a Beam coder is on it; numba's import and its one-time set-up at a process's first
compiled call (~0.5 s, whichever kernel comes first) are ``numba load``. A thread waiting (a lock, a queue,
a sleep) counts as idle, except the bundle thread waiting for the tokenizer's thread: ``tokenize (wait)``.

Nothing in the pipeline changes and nothing is measured unless a profile is started, so normal runs pay
nothing: the benchmarks start one around an in-process run (``benchmarks/pipeline_profile.py``,
``benchmarks/pipeline_scale.py --profile``). Worker *processes* (``--direct_num_workers N``) are not seen.

The shares are of thread-time: a sample of each busy thread. One in-process worker runs every Python stage
on its bundle thread and tokenizes on a thread of its own, so the bundle thread's column is the wall
time's critical path, and the next ceiling is its largest stage.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

# (path fragment, function name or None for any) -> stage; the innermost matching frame names the stage.
_FUNCTION_STAGES = {
    ("pipelines/common/files.py", "clean_line"): "clean",
    ("pipelines/common/files.py", "decode_block"): "clean",
}
_MODULE_STAGES = (
    ("pipelines/common/files.py", "read"),
    ("pipelines/inputs/byte_ranges.py", "read"),
    ("pipelines/inputs/", "read"),
    ("pipelines/pretraining/read.py", "read"),
    ("pipelines/pretraining/segmenter", "segment"),
    ("pipelines/pretraining/segment.py", "segment"),
    ("pipelines/pretraining/tokenize.py", "tokenize"),
    ("pipelines/tokenizer/load.py", "tokenize"),
    ("pipelines/common/source_stats.py", "tokenize"),
    ("pipelines/pretraining/chinese_words.py", "tokenize"),
    ("pipelines/pretraining/dedup", "dedup"),
    ("pipelines/pretraining/minhash.py", "dedup"),
    ("pipelines/pretraining/group.py", "group"),
    ("pipelines/pretraining/instances.py", "instances"),
    ("pipelines/pretraining/masking.py", "mask"),
    ("pipelines/pretraining/write.py", "write"),
    ("pipelines/common/shards.py", "write"),
    ("pipelines/common/spill.py", "write"),
    ("pipelines/pretraining/finalize.py", "finalize"),
)
# Helpers that several stages call (the shard statistics, schemas/: the shuffle keys' hash, the Arrow schema,
# the WebDataset encoder) are no stage of their own: a sample in them counts for the stage of their caller.
# Innermost frames of a thread that is waiting, not working ("run": a thread whose target is C code, such
# as gRPC's polling threads, shows only threading's own frame).
_WAITS = frozenset(
    {"wait", "get", "sleep", "select", "poll", "_wait_for_tstate_lock", "join", "acquire", "result", "_worker", "run"}
)
_WAIT_FILES = ("threading.py", "queue.py", "selectors.py", "concurrent/futures/", "grpc/")


def stage_of(frame: FrameType | None) -> str | None:
    """The stage of a thread's stack (innermost ``frame``), or None when it is idle."""
    return _stage_and_beam(frame)[0]


def _stage_and_beam(frame: FrameType | None) -> tuple[str | None, str]:
    """``stage_of``, and for a Beam sample the outermost-first chain's innermost Beam function (where the
    runner's own time goes: coders, operations, bundle bookkeeping)."""
    innermost = frame
    beam = coder = numba = False
    where = ""
    while frame is not None:
        code = frame.f_code
        path = code.co_filename.replace("\\", "/")
        stage = _FUNCTION_STAGES.get((_tail(path), code.co_name))
        if stage is None and ("/pipelines/" in path or "/schemas/" in path):
            stage = next((s for frag, s in _MODULE_STAGES if frag in path), None)
        if stage is not None:
            if _is_waiting(innermost):
                return f"{stage} (wait)", ""
            return ("numba load" if numba else stage), ""
        numba = numba or "/numba/" in path  # importing numba, loading cached kernels: once per process
        if "apache_beam" in path:
            if not beam:
                where = f"{path.rsplit('apache_beam/', 1)[-1]}:{code.co_name}"
            beam = True
            coder = coder or "/coders/" in path
        frame = frame.f_back
    if _is_waiting(innermost):
        return None, ""
    if beam:
        return ("beam coders" if coder else "beam"), where
    return "other", ""


def _tail(path: str) -> str:
    i = path.rfind("/pipelines/")
    return path[i + 1 :] if i >= 0 else path


def _is_waiting(frame: FrameType | None) -> bool:
    if frame is None:
        return True
    path = frame.f_code.co_filename.replace("\\", "/")
    return frame.f_code.co_name in _WAITS and any(w in path for w in _WAIT_FILES)


@dataclass
class StageProfile:
    """Samples per stage, over all threads and on the busiest thread (the bundle thread)."""

    interval: float
    wall_s: float = 0.0
    samples: Counter = field(default_factory=Counter)  # stage -> samples, all threads
    by_thread: dict[int, Counter] = field(default_factory=dict)  # thread id -> stage -> samples
    beam_functions: Counter = field(default_factory=Counter)  # innermost Beam function of Beam samples
    ticks: int = 0

    def busiest_thread(self) -> Counter:
        """The thread with the most busy samples: the bundle thread of an in-process run."""
        if not self.by_thread:
            return Counter()
        return max(self.by_thread.values(), key=lambda c: sum(c.values()))

    def table(self) -> str:
        """Each stage's thread-seconds and share of the wall time, all threads and on the bundle thread."""
        sec = self.wall_s / max(self.ticks, 1)  # seconds per tick, as measured (sampling drifts under load)
        main = self.busiest_thread()
        rows = [f"{'stage':>16} {'all threads s':>13} {'% of wall':>9} {'bundle thread s':>15} {'% of wall':>9}"]
        for stage, n in sorted(self.samples.items(), key=lambda kv: -kv[1]):
            m = main.get(stage, 0)
            rows.append(
                f"{stage:>16} {n * sec:>13.2f} {100 * n / max(self.ticks, 1):>8.1f}% {m * sec:>15.2f} "
                f"{100 * m / max(self.ticks, 1):>8.1f}%"
            )
        idle = self.ticks - sum(main.values())
        rows.append(f"{'(idle)':>16} {'':>13} {'':>9} {idle * sec:>15.2f} {100 * idle / max(self.ticks, 1):>8.1f}%")
        rows.append(f"wall {self.wall_s:.2f} s, {self.ticks} samples every {self.interval * 1e3:.0f} ms")
        top = ", ".join(f"{f} {n * sec:.2f} s" for f, n in self.beam_functions.most_common(6))
        if top:
            rows.append(f"beam, innermost functions (all threads): {top}")
        return "\n".join(rows)

    def shares(self) -> dict[str, float]:
        """Stage -> share of the wall time on the bundle thread (the critical path of one in-process worker)."""
        main = self.busiest_thread()
        return {s: round(n / max(self.ticks, 1), 4) for s, n in main.most_common()}


@contextmanager
def profile_stages(interval: float = 0.005) -> Iterator[StageProfile]:
    """Sample every thread of this process while the block runs; the profile is complete when it exits."""
    prof = StageProfile(interval)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(interval):
            prof.ticks += 1
            for tid, frame in sys._current_frames().items():
                if tid == sampler.ident:
                    continue
                stage, where = _stage_and_beam(frame)
                if stage is not None:
                    prof.samples[stage] += 1
                    prof.by_thread.setdefault(tid, Counter())[stage] += 1
                    if where:
                        prof.beam_functions[where] += 1

    sampler = threading.Thread(target=sample, name="stage-profile", daemon=True)
    start = time.perf_counter()
    sampler.start()
    try:
        yield prof
    finally:
        done.set()
        sampler.join()
        prof.wall_s = time.perf_counter() - start
