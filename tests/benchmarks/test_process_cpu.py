"""The CPU meter of the scale benchmark counts every process of a run: waited-for children, orphans whose parent
exited first, and processes running beside the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.lib.process_cpu import tree_cpu
from benchmarks.pipeline_throughput import run_metered

# Burns 0.3 CPU-seconds (process time, whatever the machine's load).
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


def test_counts_a_waited_child_and_an_orphan() -> None:
    # The command starts two burners: one it waits for, one it leaves running when it exits (an orphan,
    # re-parented to the meter's process, which waits for it).
    cmd = [
        sys.executable,
        "-c",
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BURN!r}])\n"
        f"subprocess.Popen([sys.executable, '-c', {BURN!r}])\n",
    ]
    m = run_metered(cmd, env={})
    assert m.cpu >= 0.6, m  # both burners, the orphan included (the interpreters' start-up on top)


def test_counts_processes_beside_the_command(tmp_path: Path) -> None:
    # A process beside the command (a cluster's worker) burns when the command tells it to, through a FIFO, and
    # says when it is done: the command waits for that, so the burn falls inside the run whatever the load.
    fifo, done = tmp_path / "go", tmp_path / "done"
    subprocess.run(["mkfifo", str(fifo)], check=True)
    beside = subprocess.Popen(
        [sys.executable, "-c", f"open({str(fifo)!r}).read()\n{BURN}open({str(done)!r}, 'w').close()\ninput()"],
        stdin=subprocess.PIPE,
    )
    try:
        start = tree_cpu([beside.pid])
        command = f"import os, time\nopen({str(fifo)!r}, 'w').close()\nwhile not os.path.exists({str(done)!r}): time.sleep(0.01)"
        m = run_metered([sys.executable, "-c", command], env={}, also=(beside.pid,))
        assert tree_cpu([beside.pid]) - start >= 0.3
        assert m.cpu >= 0.3, m
    finally:
        beside.kill()
        beside.wait()
