"""Throughput and memory of `bertprep pretraining` beside the tokenizer-only ceiling, in one run.

For each dupe factor and worker count: input MB/s, instances/s and peak memory of all processes
(the command and its Beam worker processes, RSS summed, sampled every 20 ms), and the ratio to the
ceiling: the tokenizer backend the pipeline uses (pipelines/tokenizer/wordpiece_backend.py) alone encoding the same
paragraphs on all the machine's cores (the better of one process with a thread per core and a process per core,
so the ratio is conservative). Both backends' ceilings are measured in the same run, so their ratio is printed too. The pipeline uses
all cores too: one in-process worker tokenizes with a thread per core; N worker processes, one each.

    python benchmarks/pipeline_throughput.py        # shared Wikipedia + Gutenberg books (22 MB), one run
    python benchmarks/pipeline_throughput.py --dupe 1 --workers 2 --input 'text:books/*.txt'
    python benchmarks/pipeline_throughput.py --ceiling-only   # nanotoken vs tokenizers alone, serial and threaded

Wall time is the whole command, Python start and Beam start-up included: what a user waits for.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.lib.process_cpu import become_subreaper, children_cpu, reap_orphans, tree_cpu  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Summed resident memory of ``root`` and all its descendants, in bytes."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            pass
        stack.extend(children.get(pid, ()))
    return total


@dataclass(frozen=True, slots=True)
class Measured:
    """One command's run: wall seconds, peak RSS summed over its processes (bytes), user + system CPU-seconds of
    every process of the run (``benchmarks.lib.process_cpu``), and its output."""

    seconds: float
    peak: int
    cpu: float
    out: str


def run_metered(
    cmd: list[str], env: dict[str, str], also: tuple[int, ...] = (), cwd: str | os.PathLike | None = None
) -> Measured:
    """Run ``cmd``; its wall time, the peak RSS summed over its process tree and those of ``also`` (a cluster's
    processes), the CPU-seconds of all of them during the run, and its output."""
    become_subreaper()  # orphans of the command come here, to be waited for and counted
    # Orphans of an earlier run (a killed Dask cluster's worker processes, re-parented here) are waited for
    # now, so that their CPU time lands before this run's first reading, not in it.
    reap_orphans(keep=also)
    peak = 0
    beside = tree_cpu(also)
    before = children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc.pid) + sum(tree_rss(p) for p in also))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = proc.communicate()
    seconds = time.perf_counter() - start
    done.set()
    t.join()
    reap_orphans(keep=also)
    cpu = children_cpu() - before + tree_cpu(also) - beside
    if proc.returncode:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{out}")
    return Measured(seconds, peak, cpu, out)


def run_measured(
    cmd: list[str], env: dict[str, str], also: tuple[int, ...] = (), cwd: str | os.PathLike | None = None
) -> tuple[float, int, str]:
    """Wall time, peak RSS summed over the command's process tree and those of ``also`` (a cluster's
    processes), and the output of ``cmd`` (``run_metered`` without the CPU time)."""
    m = run_metered(cmd, env, also, cwd)
    return m.seconds, m.peak, m.out


def paragraphs_of(inputs: list[str], fmt: str) -> list[list[str]]:
    """Each file's paragraphs, read with the pipeline's own reader (not timed)."""
    from bertstream.pipelines.inputs.read import read_documents
    from bertstream.pipelines.inputs.resolve import resolve_inputs

    files = resolve_inputs(inputs, fmt)
    return [[p for d in read_documents(f.path, f.format, Counter()) for p in d.paragraphs] for f in files]


def _encode_worker(tokenizer_json: str, texts: list[str], barrier, out_q, threads: int = 1, backend: str = "") -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    from bertstream.pipelines.tokenizer.wordpiece_backend import HF, WordPieceEncoder

    # The pipeline's own encode call (pipelines.pretraining.tokenize), ids and offsets arrays included.
    encoder = WordPieceEncoder(tokenizer_json, backend or HF, threads)
    barrier.wait()
    start = time.perf_counter()
    for i in range(0, len(texts), 512):
        encoder.encode(texts[i : i + 512])
    out_q.put(time.perf_counter() - start)


def tokenizer_ceiling(
    vocab: str, per_file: list[list[str]], workers: int, threads: int = 1, backend: str | None = None
) -> float:
    """MB/s of the tokenizer alone over the same paragraphs, split over ``workers`` processes of ``threads``
    threads each. ``backend``: ``tokenizers`` or ``nanotoken``; None, the one the pipeline chooses for ``vocab``."""
    from bertstream.pipelines.tokenizer.load import load_tokenizer
    from bertstream.pipelines.tokenizer.wordpiece_backend import choose_backend

    spec = load_tokenizer(vocab)
    backend = backend or choose_backend(spec.json, source=vocab).name
    shares: list[list[str]] = [[] for _ in range(workers)]
    for i, paragraphs in enumerate(per_file):  # the pipeline parallelises over files too
        shares[i % workers].extend(paragraphs)
    size = sum(len(p.encode()) for ps in per_file for p in ps)
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(workers), ctx.Queue()
    procs = [
        ctx.Process(target=_encode_worker, args=(spec.json, share, barrier, q, threads, backend)) for share in shares
    ]
    for p in procs:
        p.start()
    seconds = max(q.get() for _ in procs)
    for p in procs:
        p.join()
    return size / 1e6 / seconds


def ceilings(vocab: str, per_file: list[list[str]], cores: int) -> dict[str, float]:
    """Both backends in one run (same paragraphs, same machine load): one thread, ``cores`` threads, and the
    best of threads and processes; ``ratio``: the fast backend's best over `tokenizers`' best."""
    from bertstream.pipelines.tokenizer.wordpiece_backend import FAST, HF

    out: dict[str, float] = {}
    for name in (HF, FAST):
        out[f"{name}_serial"] = tokenizer_ceiling(vocab, per_file, 1, 1, name)
        out[f"{name}_threads"] = tokenizer_ceiling(vocab, per_file, 1, cores, name)
        out[f"{name}_processes"] = tokenizer_ceiling(vocab, per_file, cores, 1, name)
        out[name] = max(out[f"{name}_threads"], out[f"{name}_processes"])
    out["ratio_serial"] = out[f"{FAST}_serial"] / out[f"{HF}_serial"]
    out["ratio_threads"] = out[f"{FAST}_threads"] / out[f"{HF}_threads"]
    out["ratio"] = out[FAST] / out[HF]
    return out


def print_ceilings(c: dict[str, float], text_mb: float, cores: int) -> None:
    from bertstream.pipelines.tokenizer.wordpiece_backend import FAST, HF, backend

    print(f"tokenizer alone on {text_mb:.1f} MB of paragraphs, {cores} cores (MB/s):")
    print(f"{'backend':>24} {'1 thread':>9} {f'{cores} threads':>10} {f'{cores} procs':>9}")
    for name in (HF, FAST):
        b = backend(name)
        print(
            f"{b.name + ' ' + b.version:>24} {c[f'{name}_serial']:>9.2f} {c[f'{name}_threads']:>10.2f} "
            f"{c[f'{name}_processes']:>9.2f}"
        )
    print(
        f"{FAST}/{HF}: {c['ratio_serial']:.1f}x on one thread, {c['ratio_threads']:.1f}x on {cores} threads, "
        f"{c['ratio']:.1f}x best against best"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", action="append", help="glob (repeatable); default: shared Wikipedia")
    ap.add_argument("--format", default="wikiextractor")
    ap.add_argument("--vocab", help="vocab.txt; default: train a 30,522-token vocab on the input (not timed)")
    ap.add_argument("--dupe", type=int, action="append", help="dupe factors (default 1 and 5)")
    ap.add_argument("--workers", type=int, action="append", help="worker processes (default 1 and 2)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--ceiling-only", action="store_true", help="only the two tokenizer backends' ceilings")
    args = ap.parse_args()
    inputs = args.input or [
        f"wikiextractor:{SHARED / 'pretrain' / 'wikipedia' / 'wiki_*'}",
        f"text:{SHARED / 'pretrain' / 'gutenberg' / '*.txt'}",
    ]
    dupes = args.dupe or [1, 5]
    workers = args.workers or [1, 2]
    tmp = Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    vocab = args.vocab
    if vocab is None:
        from bertstream.pipelines.vocab import VocabConfig, train_vocab

        train_vocab(inputs, tmp / "vocab", VocabConfig(input_format=args.format))
        vocab = str(tmp / "vocab" / "vocab.txt")
    per_file = paragraphs_of(inputs, args.format)
    text_mb = sum(len(p.encode()) for ps in per_file for p in ps) / 1e6
    cores = os.cpu_count() or 1
    both = ceilings(vocab, per_file, cores)
    if args.ceiling_only:
        print(f"input: {', '.join(inputs)}, {len([p for ps in per_file for p in ps]):,} paragraphs")
        print_ceilings(both, text_mb, cores)
        if args.json:
            Path(args.json).write_text(json.dumps(both, indent=2) + "\n")
        return
    from bertstream.pipelines.tokenizer.load import load_tokenizer
    from bertstream.pipelines.tokenizer.wordpiece_backend import choose_backend

    used = choose_backend(load_tokenizer(vocab).json, source=vocab).name  # what the pipeline runs below encode with
    ceiling = both[used]
    bertprep = str(Path(sys.executable).with_name("bertprep"))
    rows = []
    for dupe in dupes:
        for w in workers:
            out = tmp / f"out_{dupe}_{w}"
            cmd = [
                bertprep,
                "pretraining",
                *[a for i in inputs for a in ("--input", i)],
                "--format",
                args.format,
                "--vocab",
                vocab,
                "--output",
                str(out),
                "--dupe-factor",
                str(dupe),
                "--overwrite",
                f"--direct_num_workers={w}",
            ]
            seconds, peak, _ = run_measured(cmd, env)
            manifest = json.loads((out / "manifest.json").read_text())
            input_mb = manifest["counters"]["bytes_read"] / 1e6
            rows.append(
                {
                    "dupe": dupe,
                    "workers": w,
                    "seconds": round(seconds, 2),
                    "input_mb": round(input_mb, 2),
                    "mb_per_s": round(input_mb / seconds, 3),
                    "instances": manifest["totals"]["instances"],
                    "instances_per_s": round(manifest["totals"]["instances"] / seconds),
                    "peak_mb": round(peak / 1e6),
                    "ceiling_mb_per_s": round(ceiling, 3),
                    "ratio_to_ceiling": round(input_mb / seconds / ceiling, 3),
                    "ratio_to_hf_ceiling": round(input_mb / seconds / both["tokenizers"], 3),
                    "arrow_bytes_per_instance": manifest["totals"].get("bytes_per_instance", {}).get("arrow"),
                }
            )
    print(f"input: {', '.join(inputs)}, {text_mb:.1f} MB of paragraph text; cpus: {cores}")
    print_ceilings(both, text_mb, cores)
    print(f"ceiling and ratio below: {used}, the backend the pipeline used")
    print(
        f"{'dupe':>4} {'workers':>7} {'seconds':>8} {'MB/s':>6} {'inst/s':>7} {'peak MB':>8} "
        f"{'ceiling MB/s':>12} {'ratio':>6} {'vs HF':>6} {'B/inst':>7}"
    )
    for r in rows:
        print(
            f"{r['dupe']:>4} {r['workers']:>7} {r['seconds']:>8} {r['mb_per_s']:>6} {r['instances_per_s']:>7} "
            f"{r['peak_mb']:>8} {r['ceiling_mb_per_s']:>12} {r['ratio_to_ceiling']:>6} {r['ratio_to_hf_ceiling']:>6} "
            f"{r['arrow_bytes_per_instance']:>7}"
        )
    print(
        "arrow bytes per instance vs the reference's padded TFRecord (827 B at length 128): "
        + ", ".join(f"{r['arrow_bytes_per_instance'] / 827:.2f}" for r in rows[:1])
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
