"""How `bertprep pretraining` scales with the corpus: memory, speed, and one big file on 2 workers.

Builds 1, 4 and 8 copies of the shared pretraining text (Wikipedia extracts and six Gutenberg books,
22 MB a copy) as folders of hard links (or copies) in a temporary folder, plus one big single file (the Wikipedia extracts
concatenated four times, one `wikiextractor` file of 64 MB), and runs the pipeline on each, in-process
and with 2 worker processes. For every run: wall time of the whole command, input MB/s, instances/s,
peak RSS summed over the command and its worker processes, CPU-seconds per MB of input (user + system of
every process of the run: the command, its worker processes and, for Dask, the scheduler and workers during
the run; ``benchmarks/lib/process_cpu.py``) and each runner's CPU-s/MB as a ratio to the in-process run's on the
same input, code and dupe factor in this run (what a cluster multiplies: on 2 cores wall time cannot show what
a worker wastes, CPU time can), and the ratio to the tokenizer-only ceiling
(the pipeline's tokenizer backend alone on the same paragraphs, measured in the same run, beside the other
backend's: their ratio is printed). Ratios, not absolute times, are
what compare across machines.

The Dask column (``--dask N``, 2 by default; ``--dask 0``: none): the same command with ``--runner DaskRunner``
against a fresh ``dask scheduler`` and N ``dask worker --nthreads 1`` processes on loopback, started for each
run; its peak sums the command, the scheduler and the workers (each a nanny and its worker process).

    python benchmarks/pipeline_scale.py                      # everything (about 15 minutes on 2 cores)
    python benchmarks/pipeline_scale.py --copies 1 --copies 8 --dupe 10 --workers 1
    python benchmarks/pipeline_scale.py --only-big-file
    python benchmarks/pipeline_scale.py --copies 1 --copies 8 --dupe 10 --workers 1 --no-big-file  # + Dask
    python benchmarks/pipeline_scale.py --json out.json --plot scale.png
    python benchmarks/pipeline_scale.py --copies 4 --dupe 1 --dupe 10 --dask 0 --baseline b6b896c  # paired
    python benchmarks/pipeline_scale.py --copies 4 --dupe 1 --workers 1 --dask 0 --no-big-file --profile
    python benchmarks/pipeline_scale.py --copies 4 --copies 8 --no-big-file   # CPU-s/MB, 3 runners

``--baseline REV`` runs every row twice, back to back: first with the code of commit REV (``git archive`` into
the temporary folder, imported through PYTHONPATH), then with this checkout, and prints this checkout's speed
and memory as ratios to the baseline's, measured in the same run; it also checks that both wrote the same
shards (sha256 of every shard in the two manifests).

``--profile``: in-process rows with one worker run under the stage sampler (``benchmarks/lib/stage_profile.py``,
through ``benchmarks/pipeline_profile.py``) and print each stage's share of the wall time, so the next ceiling
is visible; the sampler costs a few per cent, so those rows' seconds are not compared with unprofiled ones.
Runs without ``--profile`` are unchanged.

Nothing is written inside the repository: the corpus copies are hard links (or copies) under a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.lib.process_cpu import reap_orphans  # noqa: E402
from benchmarks.pipeline_throughput import ceilings, paragraphs_of, print_ceilings, run_metered  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "pretrain"
BIG_FILE_REPEATS = 4


def link(src: Path, dst: Path) -> None:
    """A hard link (a copy across filesystems): bertprep reads a symbolic link and its target once, as one
    input, so symbolic links would make every copy the same 22 MB."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def build_copies(root: Path, copies: int, source: Path = SHARED, dump: bool = False) -> list[str]:
    """``copies`` folders, each holding every Wikipedia and book file of ``source`` (a folder laid out as the
    shared ``pretrain/``: ``wikipedia/``, ``gutenberg/``) and, with ``dump``, its MediaWiki dump sample
    (``wikidump/*.bz2``); returns the --input patterns."""
    base = root / f"copies{copies}{'-dump' if dump else ''}"
    subs = [("wiki", source / "wikipedia", "*"), ("books", source / "gutenberg", "*.txt")]
    subs += [("dump", source / "wikidump", "*.bz2")] if dump else []
    for i in range(copies):
        for sub, src, pattern in subs:
            d = base / f"copy{i}" / sub
            d.mkdir(parents=True, exist_ok=True)
            for f in sorted(src.glob(pattern)):
                if not (d / f.name).exists():
                    link(f, d / f.name)
    patterns = [f"wikiextractor:{base}/copy*/wiki/*", f"text:{base}/copy*/books/*.txt"]
    return patterns + ([f"mediawiki:{base}/copy*/dump/*.bz2"] if dump else [])


def build_big_file(root: Path) -> list[str]:
    """One `wikiextractor` file: the shared extracts back to back, several times (distinct byte offsets,
    so distinct document ids)."""
    path = root / "big" / "wiki.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with open(path, "wb") as out:
            for _ in range(BIG_FILE_REPEATS):
                for f in sorted((SHARED / "wikipedia").iterdir()):
                    with open(f, "rb") as src:
                        shutil.copyfileobj(src, out)
    return [f"wikiextractor:{path}"]


@contextmanager
def dask_cluster(workers: int, folder: Path, env: dict[str, str]) -> Iterator[tuple[str, tuple[int, ...]]]:
    """A scheduler and ``workers`` single-threaded workers, separate processes; yields (address, their pids)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]
    folder.mkdir(parents=True, exist_ok=True)
    cmds = [[*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]]
    cmds += [
        [*dask, "worker", address, "--nthreads", "1", "--no-dashboard", "--local-directory", str(folder / f"w{i}")]
        for i in range(workers)
    ]
    log = open(folder / "cluster.log", "wb")
    procs = [subprocess.Popen(c, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True) for c in cmds]
    try:
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
        yield address, tuple(p.pid for p in procs)
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
        reap_orphans(keep=())  # each worker process of a nanny killed with it, re-parented here (a subreaper)
        log.close()
        time.sleep(0.5)


def python_path(code: Path) -> str:
    """PYTHONPATH for a command of ``code``: its folder first, then the PYTHONPATH this benchmark was given
    (packages installed beside the interpreter's, as on a machine without a package index)."""
    return os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)


def bertprep_command() -> list[str]:
    """`bertprep` of whatever ``bertstream`` the command's PYTHONPATH (or working directory) leads to."""
    return [
        sys.executable,
        "-c",
        "import sys; from bertstream.pipelines.cli import main; sys.argv[0] = 'bertprep'; main()",
    ]


def runner_label(workers: int, dask: int = 0) -> str:
    """A row's runner: ``in-process`` (one worker in this process), ``multi-proc`` (Beam's worker processes),
    ``dask N``."""
    return f"dask {dask}" if dask else "multi-proc" if workers > 1 else "in-process"


def add_cpu_ratios(rows: list[dict]) -> None:
    """Each row's CPU-s/MB against the in-process row on the same input, dupe and code, measured in this run,
    and whether it wrote the same shards."""
    key = ("input", "dupe", "code")
    base = {tuple(r[k] for k in key): r["cpu_s_per_mb"] for r in rows if r["runner"] == "in-process"}
    shards = {tuple(r[k] for k in key): r["shards_sha256"] for r in rows if r["runner"] == "in-process"}
    for r in rows:
        b = base.get(tuple(r[k] for k in key))
        r["cpu_ratio"] = round(r["cpu_s_per_mb"] / b, 3) if b else None
        # every runner writes the in-process runner's shards, byte for byte (sha256 of each)
        same = shards.get(tuple(r[k] for k in key))
        r["same_shards_as_in_process"] = None if same is None else r["shards_sha256"] == same


def checkout_of(rev: str, root: Path) -> Path:
    """The files of commit ``rev`` in a folder under ``root`` (``git archive``: no worktree to clean up)."""
    dest = root / f"baseline-{rev}"
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_one(
    inputs: list[str],
    vocab: str,
    out: Path,
    dupe: int,
    workers: int,
    env: dict[str, str],
    dask: int = 0,
    code: Path = REPO,
    profile: bool = False,
) -> dict:
    # `bertprep` of the code in ``code``: its folder first on sys.path (PYTHONPATH, and the working directory).
    env = {**env, "PYTHONPATH": python_path(code)}
    bertprep = bertprep_command()
    # The sampler sees this process's threads only; it profiles this checkout's code.
    profile = profile and not dask and workers == 1 and code == REPO
    shares_path = out.parent / "profile.json"
    if profile:
        bertprep = [sys.executable, str(REPO / "benchmarks" / "pipeline_profile.py"), "--json", str(shares_path), "--"]
    cmd = [
        *bertprep,
        "pretraining",
        *[a for i in inputs for a in ("--input", i)],
        "--vocab",
        vocab,
        "--output",
        str(out),
        "--dupe-factor",
        str(dupe),
        "--overwrite",
    ]
    if dask:
        with dask_cluster(dask, out.parent / "dask", env) as (address, pids):
            cmd += ["--runner", "DaskRunner", f"--dask_client_address={address}"]
            m = run_metered(cmd, env, also=pids, cwd=code)
    else:
        if workers > 1:
            cmd += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
        m = run_metered(cmd, env, cwd=code)
    seconds, peak = m.seconds, m.peak
    manifest = json.loads((out / "manifest.json").read_text())
    shutil.rmtree(out)
    input_mb = manifest["counters"]["bytes_read"] / 1e6
    extra = {"stage_shares": json.loads(shares_path.read_text())["shares"]} if profile else {}
    return {
        **extra,
        "dupe": dupe,
        "runner": runner_label(workers, dask),
        "workers": dask or workers,
        "seconds": round(seconds, 2),
        "input_mb": round(input_mb, 1),
        "mb_per_s": round(input_mb / seconds, 3),
        "instances": manifest["totals"]["instances"],
        "instances_per_s": round(manifest["totals"]["instances"] / seconds),
        "peak_mb": round(peak / 1e6),
        # user + system of every process of the run (the command, its workers; Dask's scheduler and workers)
        "cpu_s": round(m.cpu, 2),
        "cpu_s_per_mb": round(m.cpu / input_mb, 4),
        "code": "this" if code == REPO else "baseline",
        "shards_sha256": sorted(f"{s['path']}:{s['sha256']}" for s in manifest["shards"]),
    }


def warm_up(code: Path, vocab: str, root: Path, env: dict[str, str], source: Path = SHARED) -> None:
    """One small run with ``code`` first: numba compiles and caches its kernels on a checkout's first run (seconds,
    once per folder), which would otherwise land in that code's first measured row."""
    book = sorted((source / "gutenberg").glob("*.txt"))[0]
    # Every kernel, even where the input is too small for the pipeline to choose it (kernels/switch.py).
    run_one([f"text:{book}"], vocab, root / "warm-up", 1, 1, {**env, "BERTSTREAM_KERNELS": "always"}, code=code)


def paired(baseline: Path | None, name: str, *args, **kwargs) -> list[dict]:
    """``run_one(*args, **kwargs)`` with the baseline's code (when given), then with this checkout's: the rows
    of input ``name``, measured back to back."""
    rows = []
    for code in ([baseline] if baseline else []) + [REPO]:
        rows.append({"input": name, **run_one(*args, **kwargs, code=code)})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "shards_sha256"}), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, action="append", help="corpus copies (default 1, 4, 8)")
    ap.add_argument("--dupe", type=int, action="append", help="dupe factors (default 1 and 10)")
    ap.add_argument("--workers", type=int, action="append", help="worker processes (default 1 and 2)")
    ap.add_argument("--dask", type=int, default=2, help="Dask workers for the Dask column (0: no Dask runs)")
    ap.add_argument("--only-big-file", action="store_true", help="only the one-big-file runs (dupe 1)")
    ap.add_argument("--no-big-file", action="store_true")
    ap.add_argument("--vocab", help="vocab.txt; default: train a 30,522-token vocab on one copy (not timed)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--plot", help="also draw peak memory and MB/s against input size (PNG)")
    ap.add_argument("--baseline", metavar="REV", help="also run every row with the code of commit REV, paired")
    ap.add_argument("--profile", action="store_true", help="stage shares of the wall time (in-process, 1 worker)")
    args = ap.parse_args()
    if not SHARED.exists():
        raise SystemExit(f"needs the shared data at {SHARED}")
    root = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    # The Dask workers import this checkout, as bertstream installed on every node.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": python_path(REPO)}
    try:
        baseline = checkout_of(args.baseline, root) if args.baseline else None
        one = build_copies(root, 1)
        vocab = args.vocab
        if vocab is None:
            from bertstream.pipelines.vocab import VocabConfig, train_vocab

            train_vocab(one, root / "vocab", VocabConfig())
            vocab = str(root / "vocab" / "vocab.txt")
        for code in ([baseline] if baseline else []) + [REPO]:
            warm_up(code, vocab, root, env)
        per_file = paragraphs_of(one, "wikiextractor")
        cores = os.cpu_count() or 1
        both = ceilings(vocab, per_file, cores)
        from bertstream.pipelines.tokenizer.load import load_tokenizer
        from bertstream.pipelines.tokenizer.wordpiece_backend import choose_backend

        used = choose_backend(load_tokenizer(vocab).json, source=vocab).name  # what the runs below encode with
        ceiling = both[used]
        rows = []
        if not args.only_big_file:
            for copies in args.copies or [1, 4, 8]:
                inputs = build_copies(root, copies)
                for dupe in args.dupe or [1, 10]:
                    name = f"{copies} cop{'y' if copies == 1 else 'ies'}"
                    for w in args.workers or [1, 2]:
                        rows += paired(baseline, name, inputs, vocab, root / "out", dupe, w, env, profile=args.profile)
                    if args.dask:
                        rows += paired(baseline, name, inputs, vocab, root / "out", dupe, 0, env, dask=args.dask)
        if not args.no_big_file:
            big = build_big_file(root)
            for w in (1, 2):
                rows += paired(baseline, "one big file", big, vocab, root / "out", 1, w, env, profile=args.profile)
        for r in rows:
            r["ceiling_mb_per_s"] = round(ceiling, 3)
            r["ratio_to_ceiling"] = round(r["mb_per_s"] / ceiling, 3)
            # the issue's speed targets were set against `tokenizers`' ceiling
            r["ratio_to_hf_ceiling"] = round(r["mb_per_s"] / both["tokenizers"], 3)
        add_cpu_ratios(rows)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_ceilings(both, sum(len(p.encode()) for ps in per_file for p in ps) / 1e6, cores)
    print(
        f"\ntokenizer ceiling: {ceiling:.2f} MB/s on {cores} cores ({used}, the runs' backend; same paragraphs, same run)"
    )
    print_rows(rows)
    if baseline:
        compare(rows, args.baseline)
    summarize([r for r in rows if r["code"] == "this"])
    print_shares(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    if args.plot:
        plot(rows, args.plot)


def print_rows(rows: list[dict]) -> None:
    """The rows as a table (ratio: to the tokenizer ceiling, where one was measured)."""
    print(
        f"{'input':>13} {'MB':>6} {'dupe':>4} {'runner':>10} {'workers':>7} {'code':>8} {'seconds':>8} {'MB/s':>6} "
        f"{'inst/s':>7} {'peak MB':>8} {'ratio':>6} {'CPU-s/MB':>8} {'CPU ratio':>9}"
    )
    for r in rows:
        print(
            f"{r['input']:>13} {r['input_mb']:>6} {r['dupe']:>4} {r['runner']:>10} {r['workers']:>7} {r['code']:>8} "
            f"{r['seconds']:>8} {r['mb_per_s']:>6} {r['instances_per_s']:>7} {r['peak_mb']:>8} "
            f"{r.get('ratio_to_ceiling', '-'):>6} "
            f"{r['cpu_s_per_mb']:>8} {r['cpu_ratio'] if r['cpu_ratio'] is not None else '-':>9}"
            f"{'' if r['same_shards_as_in_process'] is not False else '  SHARDS DIFFER from in-process'}"
        )


def compare(rows: list[dict], rev: str) -> None:
    """Each row of this checkout against the baseline's same row: speed-up, memory, and the same shards."""
    key = ("input", "dupe", "runner", "workers")
    base = {tuple(r[k] for k in key): r for r in rows if r["code"] == "baseline"}
    print(f"\nthis checkout against {rev}, paired in this run:")
    for r in rows:
        b = base.get(tuple(r[k] for k in key))
        if r["code"] != "this" or b is None:
            continue
        same = "same shards" if r["shards_sha256"] == b["shards_sha256"] else "SHARDS DIFFER"
        print(
            f"  {r['input']}, dupe {r['dupe']}, {r['runner']}, {r['workers']} worker(s): "
            f"{r['mb_per_s'] / b['mb_per_s']:.2f}x the MB/s ({b['mb_per_s']} -> {r['mb_per_s']}), "
            f"CPU-s/MB {b['cpu_s_per_mb']} -> {r['cpu_s_per_mb']}, peak {b['peak_mb']} -> {r['peak_mb']} MB, {same}"
        )


def print_shares(rows: list[dict]) -> None:
    """Each profiled row's stage shares of the wall time on the bundle thread, largest first: the next ceiling."""
    for r in rows:
        if "stage_shares" in r:
            shares = ", ".join(f"{s} {100 * v:.0f}%" for s, v in r["stage_shares"].items() if v >= 0.005)
            print(f"stage shares, {r['input']}, dupe {r['dupe']}: {shares}")


def summarize(rows: list[dict]) -> None:
    """The issue's targets as ratios measured in this run."""

    def find(**kw):
        return [r for r in rows if all(r[k] == v for k, v in kw.items())]

    for runner, w in sorted({(r["runner"], r["workers"]) for r in rows}):
        small = find(input="1 copy", dupe=10, workers=w, runner=runner)
        large = find(input="8 copies", dupe=10, workers=w, runner=runner)
        if small and large:
            print(
                f"peak at dupe 10, {runner}, {w} worker(s): 176 MB {large[0]['peak_mb']} MB (target <= 1000), "
                f"{large[0]['peak_mb'] / small[0]['peak_mb']:.2f}x the 22 MB peak (target <= 1.2)"
            )
    for dupe, target in ((1, 0.8), (10, 0.55)):
        best = [
            r
            for r in rows
            if r["dupe"] == dupe
            and r["input_mb"] >= 88
            and r["input"] != "one big file"
            and r["runner"] in ("in-process", "multi-proc")
        ]
        if best:
            r = max(best, key=lambda r: r["ratio_to_hf_ceiling"])
            print(
                f"dupe {dupe} on >= 88 MB: best {r['ratio_to_hf_ceiling']} of tokenizers' ceiling "
                f"({r['ratio_to_ceiling']} of the backend's; {r['input']}, "
                f"{r['workers']} worker(s); target >= {target})"
            )
    # CPU cost of scaling out (the targets: at most 1.15x in-process at 176 MB; 2 workers <= 1 GB)
    for r in rows:
        if r["runner"] != "in-process" and r["input"] == "8 copies" and r["cpu_ratio"] is not None:
            print(
                f"CPU-s/MB at 176 MB, dupe {r['dupe']}, {r['runner']}: {r['cpu_ratio']}x in-process "
                f"(target <= 1.15); peak {r['peak_mb']} MB summed (target <= 1000)"
            )
    big = {r["workers"]: r for r in find(input="one big file") if r["runner"] in ("in-process", "multi-proc")}
    if 1 in big and 2 in big:
        print(f"one big file: 2 workers {big[1]['seconds'] / big[2]['seconds']:.2f}x faster than 1 (target >= 1.3)")


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for dupe in sorted({r["dupe"] for r in rows}):
        for runner, w in sorted({(r["runner"], r["workers"]) for r in rows}):
            pts = sorted(
                (r["input_mb"], r["peak_mb"], r["ratio_to_ceiling"])
                for r in rows
                if r["dupe"] == dupe and r["workers"] == w and r["runner"] == runner and r["input"] != "one big file"
            )
            if not pts:
                continue
            label = f"dupe {dupe}, {runner}, {w} worker{'s' if w > 1 else ''}"
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            ax2.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=label)
    ax1.set(xlabel="input MB", ylabel="peak RSS, all processes (MB)", title="memory", ylim=(0, None))
    ax2.set(xlabel="input MB", ylabel="input MB/s / tokenizer ceiling", title="speed", ylim=(0, 1))
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
