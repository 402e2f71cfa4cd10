"""`bertprep pretraining` past 2 cores, in one device call of at most 8 minutes on 16 cores.

Three modes, one grid (the runs themselves are ``benchmarks/pipeline_scale.py``'s: ``run_one`` meters wall time,
CPU-seconds of every process, peak RSS summed over them and the shards' sha256; ``dask_cluster`` starts a
``dask scheduler`` and ``dask worker`` processes):

    # here, with the package index: wheels the device lacks, the shared originals compressed, a vocabulary
    python benchmarks/scale_out.py --prepare .device --python 3.12
    # the device (16 cores, no package index): installs the carried wheels, measures, writes JSON as it goes
    python3 benchmarks/scale_out.py --carry .device --json "$OUT/scale_out.json"
    # CPU smoke (the test suite): 1 and 2 workers, 2 MB of the shared data and 2 dump files, dupe 1
    python benchmarks/scale_out.py --smoke --json /tmp/smoke.json   # --dask 2: and a Dask row

The device command (prepared, NOT yet run: no device was lent to the session that wrote it), for ``run`` with
``carry=[".device"]`` and ``timeout_s=480`` after ``--prepare .device --python X.Y`` for the device's Python
(it prints its version first; carried wheels for another one stop the run with a one-line error in seconds)::

    PY=$(command -v python3 || command -v python); $PY -V; nproc; timeout 470 $PY benchmarks/scale_out.py \\
      --carry .device --json "$OUT/scale_out.json" 2>&1 | tee "$OUT/scale_out.log" | grep -v '^WARNING'

What it measures (device):

a. Scaling: the shared Wikipedia extracts, the six books and the dump sample, hard-linked ``--copies`` times
   (21 copies: 502 MB as the manifest counts it; the dump's bytes are its bzip2 bytes), at dupe 1 and dupe 10,
   with 1 worker (Beam's in-process runner, its tokenizer on a thread per core, as a user gets it), 2, 4, 8 and
   16 worker processes (``--direct_running_mode=multi_processing``) and Dask with 16 single-threaded workers.
   Per row: seconds, MB/s, CPU-s/MB, peak MB summed over processes, and whether its shards are byte-identical
   to every other row's of that dupe factor. Goals: 16 worker processes >= 10x one worker's MB/s, Dask 16
   >= 8x, CPU-s/MB at 16 worker processes <= 1.15x one worker's.
b. A dump at scale: 192 single-stream bzip2 files, each the shared dump sample with its page ids renumbered
   (326 MB of bzip2, 1.17 GB of XML), through ``bertprep extract`` and ``bertprep pretraining`` (dupe 10),
   16 worker processes: MB/s of XML, per core and per CPU-second, and the full English dump's time COMPUTED
   from that measured rate (``FULL_DUMP_XML_MB``, docs/wikipedia.md's assumed size).

How the run was sized (a plan from this 2-core machine's figures, scaled by cores only; not a result): one
worker spends ~0.10 CPU-s/MB at dupe 1 and ~0.23 at dupe 10 (docs/benchmarks.md, 176 MB rows); on 502 MB that
is ~50 s and ~115 s for the one-worker rows, and the 2-16 worker rows together about as much again (1/2 + 1/4
+ ...), plus ~5 s of start per run: ~390 s of scaling, ~60 s of dump (1.17 GB of XML at ~3 MB/s of XML a core
for extract, ~2 MB/s for pretraining, on 16 cores), ~40 s to install and warm up: over 8 minutes on paper. So
the rows run most informative first (1 worker, 16 worker processes, Dask 16 at each dupe factor; the dump; then
8, 4, 2 workers) and a row whose planned seconds (this run's measured CPU-s/MB once there is one) would end
past ``--deadline-s`` is skipped and listed as skipped, not estimated. The JSON is rewritten after every row,
so a run cut short still returns what it measured.

``--prepare`` downloads, for one CPython version (``--python``; the device's is unknown, the device command
prints it and refuses other wheels with a one-line error), the wheels of every distribution ``bertprep``
imports that the device image lacks (it has torch, pyarrow, numba, tokenizers, grpcio): pyproject's
dependencies and the ``dask`` extra, closed over their requirements at the versions installed here (what the
tests ran), minus the device's packages and Pillow (Beam declares it; no process of these runs imports it).
Measured here: 53.4 MiB travel for 3.12 (wheels 43.0, originals 7.6, the working tree 2.8; 3.11: 53.7); both
CPython versions' wheels would be ~77 MB, over the 64 MiB a call carries. The device installs them with ``pip
install --no-index --no-deps --target`` into a folder put first on PYTHONPATH (no site-packages write, no
resolver against the image's own versions). Checked on this machine: ``--carry`` of a 3.11 preparation, run by a
fresh venv holding only the device image's packages (numpy, pyarrow, numba, llvmlite, tokenizers, grpcio),
``--mb 4 --dump-mb 3 --max-workers 2 --dask 2``: installs, measures every runner and the dump, same shards.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.lib.device_carry import CARRY_LIMIT, closure, download, on_the_image, tree_bytes  # noqa: E402
from benchmarks.pipeline_scale import (  # noqa: E402
    SHARED,
    add_cpu_ratios,
    bertprep_command,
    build_copies,
    link,
    print_rows,
    python_path,
    run_one,
    warm_up,
)
from benchmarks.pipeline_throughput import run_metered  # noqa: E402
from benchmarks.wikipedia_pipeline import repeated_dump  # noqa: E402

# Declared by a carried distribution, imported by no process of these runs (-X importtime of every process).
NOT_IMPORTED = {"pillow", "matplotlib"}  # Beam's; matplotlib: `bertprep report` only
FULL_DUMP_XML_MB = 90_000  # docs/wikipedia.md's assumption: 22-24 GB of bzip2, ~90 GB of XML
# The plan (docs/benchmarks.md, 2 cores, 176 MB): CPU-s per MB of one worker, per dupe factor; per MB of XML for
# the dump rows (docs/wikipedia.md: ~3 MB/s of XML a core reading, ~2 MB/s end to end at dupe 10).
PLAN_CPU_S_PER_MB = {1: 0.10, 10: 0.23, "extract": 0.33, "dump": 0.5}
PLAN_START_S = 5.0  # a run's start (Python, Beam, the fork server), per run
PLAN_DASK_S = 10.0  # starting a scheduler and the workers
DASK_CPU = 1.85  # Dask's CPU-s/MB against in-process (docs/benchmarks.md, dupe 1, 176 MB)


# ---------------------------------------------------------------------------------------------------- prepare


def carried_pins() -> dict[str, str]:
    """What the device call installs: :func:`top_level` and what it requires, less what the image has."""
    return closure(top_level(), skip=on_the_image() | NOT_IMPORTED)


def top_level() -> list[str]:
    """Distributions `bertprep` needs (pyproject's dependencies and the ``dask`` extra), less the device's."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [Requirement(r).name for r in project["dependencies"] + project["optional-dependencies"]["dask"]]
    skip = on_the_image() | NOT_IMPORTED
    return sorted({canonicalize_name(n) for n in names} - skip) + ["distributed"]  # dask[distributed]


def train_vocab_on(source: Path, root: Path, vocab_size: int) -> Path:
    """A vocabulary trained on one copy of ``source``'s Wikipedia extracts and books (as pipeline_scale does)."""
    from bertstream.pipelines.vocab import VocabConfig, train_vocab

    train_vocab(build_copies(root, 1, source), root / "vocab", VocabConfig(vocab_size=vocab_size))
    return root / "vocab" / "vocab.txt"


def prepare(carry: Path, python: str) -> None:
    """Fill ``carry`` (a git-ignored folder of the checkout) with what the device call needs; fail past 64 MiB."""
    if carry.exists() and any(carry.iterdir()) and not (carry / "carry.json").exists():
        raise SystemExit(f"Error: {carry} holds files that --prepare did not write; give an empty folder")
    shutil.rmtree(carry, ignore_errors=True)
    (carry / "wheels").mkdir(parents=True)
    pins = carried_pins()
    download(pins, carry / "wheels", python)
    with tarfile.open(carry / "pretrain.tar.xz", "w:xz") as tar:  # text compresses ~3.6x with xz
        for sub in ("wikipedia", "gutenberg"):
            tar.add(SHARED / sub, arcname=sub)
    (carry / "wikidump").mkdir()
    for f in (SHARED / "wikidump").glob("*.bz2"):  # bzip2 already
        shutil.copyfile(f, carry / "wikidump" / f.name)
    with tempfile.TemporaryDirectory(prefix="scale_out_vocab_") as tmp:
        vocab = train_vocab_on(SHARED, Path(tmp), 30_522)
        (carry / "vocab.txt.gz").write_bytes(gzip.compress(vocab.read_bytes(), 9))
    carried = {str(p.relative_to(carry)): p.stat().st_size for p in sorted(carry.rglob("*")) if p.is_file()}
    tree = tree_bytes(REPO)
    total = sum(carried.values()) + tree
    wheels = sum(s for p, s in carried.items() if p.startswith("wheels/"))
    meta = {
        "python": python,
        "pins": pins,
        "wheels_mib": round(wheels / 2**20, 2),
        "originals_mib": round((total - tree - wheels) / 2**20, 2),
        "tree_mib": round(tree / 2**20, 2),
        "total_mib": round(total / 2**20, 2),
    }
    (carry / "carry.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "pins"}))
    if total > CARRY_LIMIT:
        raise SystemExit(f"Error: {total / 2**20:.1f} MiB would travel (the limit is 64 MiB)")


# ---------------------------------------------------------------------------------------------------- device


def install(carry: Path, site: Path) -> None:
    """The carried wheels into ``site``, first on this process's and its children's path."""
    if not (carry / "carry.json").exists():
        raise SystemExit(f"Error: {carry}/carry.json not found: run --prepare {carry} first and carry that folder")
    want = json.loads((carry / "carry.json").read_text())["python"]
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    if want != have:
        raise SystemExit(f"Error: the carried wheels are for Python {want}, this is {have}: --prepare --python {have}")
    wheels = sorted(str(p) for p in (carry / "wheels").glob("*.whl"))
    if importlib.util.find_spec("pip") is not None:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target"]
        subprocess.run([*cmd, str(site), *wheels], check=True)
    else:  # an interpreter without pip: none of these wheels has a .data folder, so unpacking one installs it
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as z:
                z.extractall(site)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    sys.path.insert(0, str(site))


def unpack(carry: Path, source: Path) -> Path:
    """The carried originals as a folder laid out as the shared ``pretrain/``; returns the vocabulary."""
    with tarfile.open(carry / "pretrain.tar.xz") as tar:
        # the "data" filter where this Python has it (3.12, and 3.10.12/3.11.4 on); the archive is --prepare's
        tar.extractall(source, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    shutil.copytree(carry / "wikidump", source / "wikidump")
    vocab = source / "vocab.txt"
    vocab.write_bytes(gzip.decompress((carry / "vocab.txt.gz").read_bytes()))
    return vocab


def small_source(root: Path) -> Path:
    """The smoke's originals: a Wikipedia extract file, the smallest book and the dump sample (links)."""
    source = root / "source"
    picks = {
        "wikipedia": sorted((SHARED / "wikipedia").iterdir())[:1],
        "gutenberg": [min((SHARED / "gutenberg").glob("*.txt"), key=lambda p: p.stat().st_size)],
        "wikidump": sorted((SHARED / "wikidump").glob("*.bz2")),
    }
    for sub, files in picks.items():
        (source / sub).mkdir(parents=True)
        for f in files:
            link(f, source / sub / f.name)
    return source


def build_dump(source: Path, folder: Path, files: int) -> tuple[str, float, float]:
    """``files`` single-stream bzip2 dumps, each the sample with page ids renumbered (distinct documents, so
    distinct extract files), compressed on a thread per core (bz2 releases the GIL); returns the input pattern,
    MB of bzip2 and MB of XML."""
    xml = bz2.decompress(sorted((source / "wikidump").glob("*.bz2"))[0].read_bytes())
    folder.mkdir(parents=True)

    def write(k: int) -> tuple[int, int]:
        text = repeated_dump(xml, 1, first=k)
        packed = bz2.compress(text, 9)
        (folder / f"enwiki-{k:04d}.xml.bz2").write_bytes(packed)
        return len(packed), len(text)

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        sizes = list(pool.map(write, range(files)))
    return f"mediawiki:{folder}/*.xml.bz2", sum(b for b, _ in sizes) / 1e6, sum(x for _, x in sizes) / 1e6


def per_copy_mb(source: Path) -> float:
    """MB of one copy of ``source`` (extracts, books and dump sample) as the manifest counts them (the dump's
    bzip2 bytes)."""
    subs = {"wikipedia": "*", "gutenberg": "*.txt", "wikidump": "*.bz2"}  # what build_copies links
    return sum(p.stat().st_size for sub, pattern in subs.items() for p in (source / sub).glob(pattern)) / 1e6


def shards_digest(row: dict) -> str:
    return hashlib.sha256("\n".join(row["shards_sha256"]).encode()).hexdigest()[:16]


def run_extract(dump: str, out: Path, workers: int, env: dict[str, str]) -> dict:
    """`bertprep extract` of ``dump`` with ``workers`` worker processes, metered like run_one's rows."""
    cmd = [*bertprep_command(), "extract", "--input", dump, "--output", str(out), "--overwrite"]
    cmd += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"] if workers > 1 else []
    m = run_metered(cmd, {**env, "PYTHONPATH": python_path(REPO)}, cwd=REPO)
    manifest = json.loads((out / "manifest.json").read_text())
    shutil.rmtree(out)
    seconds, cpu, peak_mb = round(m.seconds, 2), round(m.cpu, 2), round(m.peak / 1e6)
    return {"seconds": seconds, "cpu_s": cpu, "peak_mb": peak_mb, "documents": manifest["totals"]["documents"]}


class Plan:
    """Runs rows in order; skips one whose planned seconds would end past the deadline, and says so."""

    def __init__(self, deadline_s: float, out: Callable[[], None]) -> None:
        self.start, self.deadline, self.save = time.monotonic(), deadline_s, out
        self.skipped: list[dict] = []

    def left(self) -> float:
        return self.deadline - (time.monotonic() - self.start)

    def fits(self, what: str, planned_s: float) -> bool:
        if planned_s <= self.left():
            return True
        self.skipped.append({"row": what, "planned_s": round(planned_s), "left_s": round(self.left())})
        print(f"skipped {what}: planned {planned_s:.0f} s, {self.left():.0f} s left", flush=True)
        self.save()
        return False


def planned_s(cpu_s_per_mb: float, mb: float, workers: int, cores: int, dask: bool) -> float:
    """Seconds a row is planned to take: its CPU spread over its workers (one core each), plus its start."""
    cpu = cpu_s_per_mb * mb * (DASK_CPU if dask else 1.0)
    return cpu / max(1, min(workers, cores)) + PLAN_START_S + (PLAN_DASK_S if dask else 0.0)


def summarize(result: dict) -> dict:
    """The issue's goals as ratios of this run's rows: per dupe factor, each row against the one-worker row."""
    out: dict = {}
    for dupe in sorted({r["dupe"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["dupe"] == dupe]
        one = next((r for r in rows if r["runner"] == "in-process"), None)
        s: dict = {"identical_shards": len({r["shards_digest"] for r in rows}) == 1, "rows": len(rows)}
        for r in rows:
            if one is not None and r is not one:
                key = r["runner"] if r["runner"].startswith("dask") else f"{r['runner']} {r['workers']}"
                s[key] = {"speedup": round(r["mb_per_s"] / one["mb_per_s"], 2), "cpu_ratio": r["cpu_ratio"]}
        # the goals at the most workers of the run: speed-up >= 10x (processes), >= 8x (Dask), CPU <= 1.15x
        most = max(r["workers"] for r in rows)
        goals = [(f"multi-proc {most}", "speedup", 10.0), (f"dask {most}", "speedup", 8.0)]
        goals += [(f"multi-proc {most}", "cpu_ratio", 1.15)]
        for key, field, target in goals:
            value = s.get(key, {}).get(field)
            if value is not None:
                met = value <= target if field == "cpu_ratio" else value >= target
                s.setdefault("goals", []).append(
                    f"{key} {field} {value} (goal {target}): {'met' if met else 'NOT met'}"
                )
        out[f"dupe {dupe}"] = s
    return out


def dump_rates(extract: dict, pretrain: dict, xml_mb: float, workers: int) -> dict:
    """MB/s of XML (wall, per core, per CPU-second) and the full dump's time computed from them."""
    out = {}
    for name, r in (("extract", extract), ("pretraining", pretrain)):
        rate = xml_mb / r["seconds"]
        out[name] = {
            "xml_mb_per_s": round(rate, 2),
            "xml_mb_per_s_per_core": round(rate / workers, 3),
            "xml_mb_per_cpu_s": round(xml_mb / r["cpu_s"], 3),
            # computed from the rate measured above, not measured: FULL_DUMP_XML_MB at this rate, this machine
            "full_dump_hours_computed": round(FULL_DUMP_XML_MB / rate / 3600, 2),
        }
    return out


def measure(args: argparse.Namespace) -> None:
    cores = os.cpu_count() or 1
    root = Path(tempfile.mkdtemp(prefix="scale_out_"))
    result: dict = {"machine": {}, "plan": {}, "rows": [], "dump": {}, "skipped": [], "summary": {}}

    def save() -> None:
        """Summarize what is measured so far and write it: a run cut short keeps its rows."""
        result["skipped"] = plan.skipped
        add_cpu_ratios(result["rows"])
        result["summary"] = summarize(result)
        if args.json:
            tmp = Path(args.json).with_suffix(".tmp")
            rows = [{k: v for k, v in r.items() if k != "shards_sha256"} for r in result["rows"]]
            tmp.write_text(json.dumps({**result, "rows": rows}, indent=2) + "\n")
            tmp.replace(args.json)

    plan = Plan(args.deadline_s, save)
    try:
        # one worker, the most, then halving: [1, 16, 8, 4, 2] (the first two run first at each dupe factor)
        workers = [1] + [
            args.max_workers >> i for i in range(args.max_workers.bit_length()) if args.max_workers >> i > 1
        ]
        dask = args.dask
        if args.smoke:
            source = small_source(root)
            vocab = train_vocab_on(source, root / "v", 4_000)
            copies, dupes, dump_files, dump_dupe = 1, [1], 2, 1
        else:
            install(Path(args.carry), root / "site")
            source = root / "source"
            vocab = unpack(Path(args.carry), source)
            copies, dupes, dump_dupe = math.ceil(args.mb / per_copy_mb(source)), [1, 10], 10
            sample_mb = next((source / "wikidump").glob("*.bz2")).stat().st_size / 1e6
            w = args.max_workers  # whole rounds of single-stream files, one per worker
            dump_files = w * math.ceil(args.dump_mb / sample_mb / w)
        mb = per_copy_mb(source) * copies
        result["machine"] = {
            "cores": cores,
            "python": platform.python_version(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "load_average_at_start": os.getloadavg()[0],
            "smoke": args.smoke,
        }
        result["plan"] = {"copies": copies, "input_mb": round(mb, 1), "dump_files": dump_files, **vars(args)}
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": python_path(REPO)}
        if not args.smoke:  # numba's first compile, kept out of the first row (the smoke's figures are no result)
            warm_up(REPO, str(vocab), root, env, source=source)
        inputs = build_copies(root, copies, source, dump=True)
        dump, bz2_mb, xml_mb = build_dump(source, root / "dump", dump_files)
        result["dump"] = {"files": dump_files, "bz2_mb": round(bz2_mb, 1), "xml_mb": round(xml_mb, 1)}
        print(
            f"{cores} cores; {copies} copies, {mb:.1f} MB; dump {bz2_mb:.0f} MB of bzip2, {xml_mb:.0f} MB of XML; "
            f"setup {time.monotonic() - plan.start:.0f} s",
            flush=True,
        )

        def row(dupe: int, w: int, on_dask: int = 0) -> None:
            label = f"dupe {dupe}, {'Dask' if on_dask else 'workers'} {on_dask or w}"
            # CPU-s/MB measured in this run at this dupe factor (the highest: a skip beats a killed call)
            seen = [r["cpu_s_per_mb"] for r in result["rows"] if r["dupe"] == dupe]
            rate = max(seen) if seen else PLAN_CPU_S_PER_MB[dupe]
            if plan.fits(label, planned_s(rate, mb, on_dask or w, cores, bool(on_dask))):
                r = run_one(inputs, str(vocab), root / "out", dupe, w, env, dask=on_dask)
                name = f"{copies} cop{'y' if copies == 1 else 'ies'}"
                result["rows"].append({"input": name, **r, "shards_digest": shards_digest(r)})
                print(json.dumps({k: v for k, v in result["rows"][-1].items() if k != "shards_sha256"}), flush=True)
                save()

        head, tail = workers[:2], workers[2:]  # 1 and the most workers first, then the rest as time allows
        for dupe in dupes:
            for w in head:
                row(dupe, w)
            if dask:
                row(dupe, 1, dask)
        w = max(workers)
        plan_ex = planned_s(PLAN_CPU_S_PER_MB["extract"], xml_mb, w, cores, False)
        plan_pt = planned_s(PLAN_CPU_S_PER_MB["dump"], xml_mb, w, cores, False)
        if plan.fits("dump: extract and pretraining", plan_ex + plan_pt):
            ex = run_extract(dump, root / "extracted", w, env)
            pt = run_one([dump], str(vocab), root / "out", dump_dupe, w, env)
            pt = {k: pt[k] for k in ("seconds", "cpu_s", "peak_mb", "instances", "input_mb")}
            result["dump"] |= {"workers": w, "dupe": dump_dupe, "extract": ex, "pretraining": pt}
            result["dump"]["rates"] = dump_rates(ex, pt, xml_mb, w)
            print(json.dumps(result["dump"]), flush=True)
            save()
        for dupe in dupes:
            for w in tail:
                row(dupe, w)
        save()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_rows(result["rows"])
    print(json.dumps({"summary": result["summary"], "dump": result["dump"], "skipped": result["skipped"]}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", metavar="DIR", help="fill DIR (git-ignored, e.g. .device) with what to carry")
    mode.add_argument("--carry", metavar="DIR", help="(device) install DIR's wheels and measure on its originals")
    mode.add_argument("--smoke", action="store_true", help="CPU: 1 and 2 workers, 2 MB and 2 dump files, dupe 1")
    ap.add_argument("--python", default="3.12", help="--prepare: the device's CPython, major.minor")
    ap.add_argument("--json", help="write the results here (rewritten after every row)")
    ap.add_argument("--mb", type=float, default=500, help="input MB for the scaling rows (whole copies)")
    ap.add_argument("--dump-mb", type=float, default=300, help="MB of bzip2 for the dump rows (16-file rounds)")
    ap.add_argument("--max-workers", type=int, help="the most worker processes, then halved down to 2 (16; smoke 2)")
    ap.add_argument("--dask", type=int, help="Dask workers, 0: no Dask rows (16; smoke 0)")
    ap.add_argument("--deadline-s", type=float, default=440, help="skip rows planned to end past this")
    args = ap.parse_args()
    args.max_workers = (2 if args.smoke else 16) if args.max_workers is None else args.max_workers
    args.dask = (0 if args.smoke else 16) if args.dask is None else args.dask
    if args.prepare:
        prepare(Path(args.prepare), args.python)
    else:
        measure(args)


if __name__ == "__main__":
    main()
