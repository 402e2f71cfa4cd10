"""Where a run's CPU-seconds go, by process and thread: what `pipeline_scale.py`'s CPU-s/MB is made of.

Runs one ``bertprep`` command (everything after ``--``) and reads ``/proc`` every 50 ms: every process of the
run (the command, Beam's worker processes, the fork server and the workers it forks: this process is a child
subreaper, so a worker whose parent exits first stays in view) and each of its threads' user + system
seconds, the last reading before it ended. Prints them by process, largest first, each process's threads
grouped by name (a Python thread shows the name its OS thread has: ``python`` unless it set one; gRPC's and
the tokenizer's are named).

    python benchmarks/cpu_breakdown.py -- pretraining --input 'text:books/*.txt' --vocab v.txt --output out \
        --direct_num_workers=2 --direct_running_mode=multi_processing

The stage sampler (``pipeline_profile.py``) names the stages of an in-process run; a worker process runs the
same stages on its bundle thread, so this split (start-up, bundle thread, tokenizer thread, gRPC) is what the
two runners differ by. Up to 50 ms of each process's last moments are not seen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.process_cpu import TICK, become_subreaper, reap_orphans  # noqa: E402


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as f:
                    out[int(f.read().rsplit(")", 1)[1].split()[1])].append(int(e))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _threads(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, user + system seconds) of ``pid``'s living threads."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                line = f.read()
        except OSError:
            continue
        name = line[line.index("(") + 1 : line.rindex(")")]
        fields = line.rsplit(")", 1)[1].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def _label(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    if "beam_worker" in cmd:
        return "worker client (beam_worker)"
    if "sdk_worker_main" in cmd:
        return "worker (cold)"
    return "bertprep" if "pretraining" in cmd else cmd[:60]


def main() -> None:
    if "--" not in sys.argv:
        raise SystemExit(__doc__)
    argv = sys.argv[sys.argv.index("--") + 1 :]
    become_subreaper()
    me = os.getpid()
    cmd = [
        sys.executable,
        "-c",
        "import sys; from bertstream.pipelines.cli import main; sys.argv[0] = 'bertprep'; main()",
    ]
    proc = subprocess.Popen([*cmd, *argv], env={**os.environ, "PYTHONPATH": str(REPO)})
    seen: dict[int, dict[int, tuple[str, float]]] = {}
    labels: dict[int, str] = {}
    parents: dict[int, int] = {}
    while proc.poll() is None:
        kids = _children()
        stack = [c for c in kids.get(me, [])]
        while stack:
            pid = stack.pop()
            labels.setdefault(pid, _label(pid))
            seen.setdefault(pid, {}).update(_threads(pid))
            for c in kids.get(pid, []):
                parents.setdefault(c, pid)
                stack.append(c)
        time.sleep(0.05)
    reap_orphans(keep=())
    total = 0.0
    rows = []
    for pid, threads in seen.items():
        by_name: dict[str, float] = defaultdict(float)
        for name, cpu in threads.values():
            by_name[name] += cpu
        cpu = sum(by_name.values())
        total += cpu
        label = labels[pid]
        if label == "bertprep" and pid != proc.pid:
            label = "fork server" if any(parents.get(c) == pid for c in seen) else "forked worker"
        rows.append((cpu, pid, label, by_name))
    print(f"exit {proc.returncode}; CPU-seconds by process (user + system), {total:.2f} in all:")
    for cpu, pid, label, by_name in sorted(rows, reverse=True):
        if cpu < 0.01:
            continue
        threads = ", ".join(f"{n} {s:.2f}" for n, s in sorted(by_name.items(), key=lambda kv: -kv[1]) if s >= 0.05)
        print(f"  {cpu:7.2f}  {label} (pid {pid}): {threads}")


if __name__ == "__main__":
    main()
