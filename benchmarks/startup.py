"""Start-up: a small input through ``bertprep pretraining`` in-process, wall time and peak memory of the whole
process, against the Beam import alone (a plain ``import apache_beam`` in a fresh process: the yardstick) and
against the same run with the compiled kernels forced (``BERTSTREAM_KERNELS=always``: what every run paid before
issue 54, when the segmentation scan and the masking kernel always started numba). The last line splits the run
into its phases (medians): interpreter start, Beam's import, ours, the checks, output claim and graph building,
Beam's translation and run of the graph, the manifest's reading and clean-up, and the interpreter's exit.

Each round runs the three commands in turn, each a fresh process (paired: a busy machine slows the three of a
round alike); the figures are each command's median over the rounds, and the ratios are taken round by round.
The kernels are warmed once first (numba's on-disk cache), so no round pays a compilation.

    .venv/bin/python benchmarks/startup.py [--kb 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import shared_path  # noqa: E402

# The run, with a clock read (CLOCK_MONOTONIC: the parent's clock too) after each phase, printed last on stderr.
_RUN = """
import json, sys, time
stamps = {"start": time.perf_counter()}
import bertstream.pipelines, apache_beam
stamps["import Beam"] = time.perf_counter()
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
stamps["import ours"] = time.perf_counter()
beam_run = apache_beam.Pipeline.run
def run(self, *args, **kwargs):
    stamps["check, claim, graph"] = time.perf_counter()
    try:
        return beam_run(self, *args, **kwargs)
    finally:
        stamps["Beam: translate, run"] = time.perf_counter()
apache_beam.Pipeline.run = run
run_pretraining(PretrainingJob(inputs=(sys.argv[1],), vocab=sys.argv[2], output=sys.argv[3], config=PretrainingConfig()))
stamps["manifest, clean-up"] = time.perf_counter()
print("STAMPS " + json.dumps(stamps), file=sys.stderr)
"""

# Phases of a run: interpreter start (the parent's clock to the script's first line), each stamp to the next,
# the interpreter's exit (the last stamp to the parent's reaping).
PHASES = ("interpreter start", "import Beam", "import ours", "check, claim, graph", "Beam: translate, run",
          "manifest, clean-up", "exit")  # fmt: skip


def measure(argv: list[str], env: dict[str, str], phases: list[dict[str, float]] | None = None) -> tuple[float, float]:
    """``(wall seconds, peak resident MB)`` of one process running ``argv``; with ``phases``, its phases' seconds
    (what :data:`_RUN` prints) appended to it."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode:
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}):\n{err[-2000:]}")
    if phases is not None:
        line = next(ln for ln in err.splitlines() if ln.startswith("STAMPS "))
        clock = [start, *json.loads(line.removeprefix("STAMPS ")).values(), start + wall]
        phases.append({name: b - a for name, a, b in zip(PHASES, clock, clock[1:])})
    return wall, usage.ru_maxrss / 1024  # Linux reports kB


def small_input(path: Path, kb: int) -> None:
    """About ``kb`` KB of shared Wikipedia as eight articles: the head of each of eight files' first article, cut
    at the first line's end past ``kb / 8`` KB and closed, so that the run sees several documents as real ones do."""
    wiki = shared_path("pretrain", "wikipedia")
    parts = []
    for i in range(8):
        text = (wiki / f"wiki_{i:02d}").read_text(encoding="utf-8")
        head = text[: text.find("\n", kb * 1024 // 8) + 1]
        parts.append(head + "</doc>\n")
    path.write_text("".join(parts), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kb", type=int, default=20, help="input size in KB (default 20)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        work = Path(tmp)
        src = work / "input.txt"
        small_input(src, args.kb)
        size_kb = src.stat().st_size / 1024
        from bertstream.pipelines.vocab import VocabConfig, train_vocab

        train_vocab([str(src)], work / "vocab", VocabConfig(input_format="wikiextractor", vocab_size=2000))
        vocab = str(work / "vocab" / "vocab.txt")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("BERTSTREAM_KERNELS", None)
        out = iter(range(10**6))

        def run() -> list[str]:
            return [sys.executable, "-c", _RUN, str(src), vocab, str(work / f"out{next(out)}")]

        commands = {
            "import apache_beam": ([sys.executable, "-c", "import apache_beam"], env),
            "bertprep, kernels by size": (None, env),
            "bertprep, kernels always": (None, {**env, "BERTSTREAM_KERNELS": "always"}),
        }
        measure(run(), commands["bertprep, kernels always"][1])  # warm numba's cache, not counted
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        phases: list[dict[str, float]] = []
        for _ in range(args.rounds):
            for name, (argv, cmd_env) in commands.items():
                figures[name].append(
                    measure(argv or run(), cmd_env, phases if name == "bertprep, kernels by size" else None)
                )
    print(f"start-up of a {size_kb:.0f} KB input in-process, {args.rounds} paired rounds, "
          f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (medians)")  # fmt: skip
    print(f"{'command':<28} {'wall s':>7} {'peak MB':>8}")
    for name, rows in figures.items():
        wall = statistics.median(w for w, _ in rows)
        peak = statistics.median(m for _, m in rows)
        print(f"{name:<28} {wall:7.2f} {peak:8.0f}")
    beam, auto, always = (figures[n] for n in commands)
    ratio = statistics.median(a[0] / b[0] for a, b in zip(auto, always))
    above = statistics.median(a[0] - b[0] for a, b in zip(auto, beam))
    print(f"by size / always: wall x{ratio:.2f}; by size above the Beam import alone: {above:+.2f} s, "
          f"{statistics.median(a[1] - b[1] for a, b in zip(auto, beam)):+.0f} MB")  # fmt: skip
    print(
        "by size, phases (median s): " + ", ".join(f"{n} {statistics.median(p[n] for p in phases):.2f}" for n in PHASES)
    )


if __name__ == "__main__":
    main()
