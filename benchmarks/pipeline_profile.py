"""Where the time of one `bertprep pretraining` run goes: by stage (in-process) or by process and thread.

By stage (default; see ``benchmarks/lib/stage_profile.py``): runs ``run_pretraining`` in this process (the
FnApiRunner, one in-process worker, as a plain ``bertprep pretraining`` does) on one copy of the shared
pretraining text (Wikipedia extracts and six Gutenberg books, 22 MB), with the stage sampler on, and prints the
table: read, clean, segment, tokenize, group, instances, mask, write, finalize and Beam, in thread-seconds and
as shares of the wall time.

    python benchmarks/pipeline_profile.py                       # one copy, dupe 1, a vocab trained first
    python benchmarks/pipeline_profile.py --vocab vocab.txt --dupe 5 --json profile.json
    python benchmarks/pipeline_profile.py --json p.json -- pretraining --input ... --vocab v.txt --output out

After ``--``: a whole ``bertprep`` command line, run in this process under the sampler (what
``benchmarks/pipeline_scale.py --profile`` runs instead of ``bertprep``, for its in-process rows).
The vocabulary (when not given) is trained before the clock starts; nothing is written in the repository.

By process (``--by-process``): what ``pipeline_scale.py``'s CPU-s/MB is made of. Runs one ``bertprep`` command
(everything after ``--``) and reads ``/proc`` every 50 ms: every process of the run (the command, Beam's worker
processes, the fork server and the workers it forks: this process is a child subreaper, so a worker whose
parent exits first stays in view) and each of its threads' user + system seconds, the last reading before it
ended. Prints them by process, largest first, each process's threads grouped by name (a Python thread shows the
name its OS thread has: ``python`` unless it set one; gRPC's and the tokenizer's are named).

    python benchmarks/pipeline_profile.py --by-process -- pretraining --input 'text:books/*.txt' --vocab v.txt \
        --output out --direct_num_workers=2 --direct_running_mode=multi_processing

The stage sampler names the stages of an in-process run; a worker process runs the same stages on its bundle
thread, so the by-process split (start-up, bundle thread, tokenizer thread, gRPC) is what the two runners differ
by. Up to 50 ms of each process's last moments are not seen.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.lib.process_cpu import TICK, become_subreaper, reap_orphans  # noqa: E402
from benchmarks.lib.stage_profile import StageProfile, profile_stages  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "pretrain"
DEFAULT_INPUTS = [f"wikiextractor:{SHARED / 'wikipedia' / '*'}", f"text:{SHARED / 'gutenberg' / '*.txt'}"]


def profile_run(
    inputs: list[str], vocab: str, out: Path, dupe: int = 1, beam_args: tuple[str, ...] = ()
) -> tuple[StageProfile, dict]:
    """One in-process run under the stage sampler: (the profile, the manifest's counters and totals)."""
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.pretraining.pipeline import run_pretraining

    job = PretrainingJob(
        inputs=tuple(inputs),
        vocab=vocab,
        output=str(out),
        config=PretrainingConfig(dupe_factor=dupe),
        overwrite=True,
        beam_args=beam_args,
    )
    with profile_stages() as prof:
        result = run_pretraining(job)
    manifest = json.loads((out / "manifest.json").read_text())
    del result
    return prof, {"counters": manifest["counters"], "totals": manifest["totals"]}


def profile_cli(argv: list[str], json_path: str | None) -> None:
    """``bertprep ARGV`` in this process under the sampler; the table goes to stderr, the shares to ``json_path``."""
    from bertstream.pipelines.cli import main as bertprep

    start = time.perf_counter()
    with profile_stages() as prof:
        bertprep(args=argv, standalone_mode=False)
    seconds = time.perf_counter() - start
    print(prof.table(), file=sys.stderr)
    if json_path:
        Path(json_path).write_text(json.dumps({"seconds": seconds, "shares": prof.shares()}, indent=2) + "\n")


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


def by_process(argv: list[str]) -> None:
    """``--by-process``: ``bertprep ARGV`` in a child process; its processes' and threads' CPU-seconds."""
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


def main() -> None:
    if "--" in sys.argv:
        at = sys.argv.index("--")
        ap = argparse.ArgumentParser()
        ap.add_argument("--json")
        ap.add_argument("--by-process", action="store_true")
        pre = ap.parse_args(sys.argv[1:at])
        if pre.by_process:
            by_process(sys.argv[at + 1 :])
        else:
            profile_cli(sys.argv[at + 1 :], pre.json)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", action="append", help="format:glob (repeatable); default: one copy of the shared text")
    ap.add_argument("--vocab", help="vocab.txt; default: train a 30,522-token vocab on the input (not timed)")
    ap.add_argument("--dupe", type=int, default=1)
    ap.add_argument("--json", help="also write the shares here")
    ap.add_argument("--by-process", action="store_true", help="CPU by process and thread of the command after --")
    args = ap.parse_args()
    if args.by_process:
        ap.error("--by-process needs a bertprep command line after --")
    inputs = args.input or DEFAULT_INPUTS
    tmp = Path(tempfile.mkdtemp(prefix="bench_profile_"))
    try:
        vocab = args.vocab
        if vocab is None:
            from bertstream.pipelines.vocab import VocabConfig, train_vocab

            train_vocab(inputs, tmp / "vocab", VocabConfig())
            vocab = str(tmp / "vocab" / "vocab.txt")
        start = time.perf_counter()
        prof, manifest = profile_run(inputs, vocab, tmp / "out", args.dupe)
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mb = manifest["counters"]["bytes_read"] / 1e6
    print(f"{mb:.1f} MB in {seconds:.2f} s ({mb / seconds:.2f} MB/s), {manifest['totals']['instances']} instances")
    print(prof.table())
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": seconds, "mb": mb, "shares": prof.shares()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
