"""The GPU suite's real commands (parts c and d of ``benchmarks/gpu_suite.py``) and what they need carried.

- ``prepare``: on a CPU machine with apache-beam and ``../shared/data``: a vocabulary, pretraining shards (Arrow,
  length 128), SST-2 task data, the wheels the device image lacks (``CARRIED``), and the loader's CPU rehearsal
  against BERT-base's demand; all in one folder that travels with the device call.
- ``pretrain_rates`` (c): ``berttrain pretrain`` on those shards, static and dynamic masking, loader workers;
  its steady sequences/s from the run's own ``metrics.jsonl``.
- ``finetune_runs`` (d): ``berttrain finetune`` on SST-2 from (c)'s checkpoint, bf16 against fp32, several seeds.
- ``import_report``: every command runs under ``python -X importtime``; the third-party distributions it
  imported, and those outside the device image (torch, pyarrow, numba, tokenizers, transformers and what they
  require) that are not carried: the device has no package index, so that list must be empty.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.device_carry import download, folder_bytes, normalise, on_the_image

REPO = Path(__file__).resolve().parents[2]
# Pure-Python wheels the trainer imports that the image may lack (webdataset: the shard reader's module imports
# it; braceexpand: webdataset's; click: the command line; fsspec: the data paths). Carried at the versions
# tested here; `pip install --no-index --find-links` leaves any the image already has alone.
CARRIED = ("webdataset", "braceexpand", "click", "fsspec")
SST2_DEV_ROWS = 872


def run_logged(args: Sequence[str], log: Path, timeout: float, *, site: Path | None) -> tuple[int, float, str]:
    """Run ``python -X importtime -m <args>`` from the repository root; (exit status, wall seconds, stderr).

    ``PYTHONPATH`` gets the repository root first: the device runs the checkout, not an installed wheel.
    ``site`` (the CPU rehearsal, ``benchmarks.lib.device_python.build_site``): ``python -S`` with only that folder
    of third-party code, what the device has."""
    paths = [str(REPO), *([str(site)] if site else []), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    cmd = [sys.executable, *(["-S"] if site else []), "-X", "importtime", "-m", *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, _text(e.stdout), _text(e.stderr)
    wall = time.perf_counter() - t0
    log.parent.mkdir(parents=True, exist_ok=True)
    shown = "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))
    log.write_text(" ".join(cmd) + f"\n# exit {rc}, {wall:.1f}s\n{out}\n{shown}\n")
    return rc, wall, err


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


# --- what a command imports ------------------------------------------------------------------------------


def imported_modules(importtime_stderr: str) -> set[str]:
    """Top-level module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and not name.startswith("imported"):
                names.add(name.split(".")[0])
    return names


def import_report(stderrs: Sequence[str], available: set[str] | None) -> dict[str, Any]:
    """Third-party distributions the commands imported, and beyond the device image.

    ``-X importtime`` also lists imports that failed, so with ``available`` (the CPU rehearsal: the normalised
    distributions of the device's site folder, the only third-party code the commands could import) a name
    outside it was tried and absent: an optional import the commands ran without (their exit status says
    they did)."""
    modules: set[str] = set()
    for err in stderrs:
        modules |= imported_modules(err)
    by_module = md.packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    dists = {
        normalise(d)
        for m in modules
        if m not in stdlib and not m.startswith("_") and m not in ("bertstream", "benchmarks")
        for d in by_module.get(m, [])
    }
    imported = dists & available if available is not None else dists
    return {
        "imported_distributions": sorted(imported),
        "needed_beyond_image": sorted(imported - on_the_image()),
        "carried": sorted(normalise(c) for c in CARRIED),
        "tried_and_absent": sorted(dists - imported),
    }


# --- preparation on the CPU machine -----------------------------------------------------------------------


def _bertprep(args: list[str]) -> None:
    """One ``bertprep`` command in this process (its command line parsed by its own click group)."""
    from bertstream.pipelines.cli import main

    try:
        main(args, standalone_mode=False)
    except SystemExit as e:  # click's own exit on success is 0
        if e.code:
            raise


def head_lines(src: Path, dst: Path, n: int) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open(encoding="utf-8") as f:
        dst.write_text("".join(line for _, line in zip(range(n), f)), encoding="utf-8")
    return dst


def prepare(root: Path, shared: Path, *, smoke: bool, wheels: bool) -> dict[str, Any]:
    """Vocabulary, pretraining shards, SST-2 train/dev task data (and the wheels) under ``root``."""
    wiki = shared / "pretrain" / "wikipedia"
    sst2 = shared / "tasks" / "sst2"
    if not wiki.is_dir() or not sst2.is_dir():
        raise SystemExit(f"Error: --prepare needs the shared data at {shared} (pretrain/wikipedia, tasks/sst2)")
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # Smoke: one Wikipedia file, a small vocabulary, short sequences. Full: BERT's vocabulary size and length
    # 128 over ten Wikipedia files at dupe 2, sized so shards and wheels stay under the call's 64 MiB.
    inputs = [f"wikiextractor:{wiki}/wiki_00"] if smoke else [f"wikiextractor:{wiki}/wiki_0*"]
    vocab_size, length, preds, dupe = (2000, 64, 10, 1) if smoke else (30522, 128, 20, 2)
    train_rows = 400 if smoke else 8_000
    in_args = [a for i in inputs for a in ("--input", i)]
    _bertprep(["vocab", *in_args, "--vocab-size", str(vocab_size), "--output", str(root / "vocab"), "--overwrite"])
    vocab = str(root / "vocab" / "vocab.txt")
    shards = root / f"shards{length}"
    _bertprep(
        ["pretraining", *in_args, "--vocab", vocab, "--output", str(shards), "--overwrite"]
        + ["--max-seq-length", str(length), "--max-predictions-per-seq", str(preds), "--dupe-factor", str(dupe)]
        + ["--num-shards", "2" if smoke else "8", "--output-format", "arrow"]
    )
    real = {length: shards.name}  # real shards by length: part (a)'s unpadded and padded rows
    if not smoke:  # and length 512, where a quarter of the positions are padding (four files, ~3 MB)
        real[512] = "shards512"
        _bertprep(
            ["pretraining", "--input", f"wikiextractor:{wiki}/wiki_0[0-3]", "--vocab", vocab]
            + ["--output", str(root / "shards512"), "--overwrite", "--max-seq-length", "512"]
            + ["--max-predictions-per-seq", "76", "--dupe-factor", "1", "--num-shards", "2", "--output-format", "arrow"]
        )
    with tempfile.TemporaryDirectory(prefix="gpu-prepare-") as tmp:  # the rows' heads: not carried
        train_tsv = head_lines(sst2 / "train.tsv", Path(tmp) / "sst2_train.tsv", train_rows + 1)
        dev_tsv = head_lines(sst2 / "dev.tsv", Path(tmp) / "sst2_dev.tsv", (100 if smoke else SST2_DEV_ROWS) + 1)
        for split, tsv in (("train", train_tsv), ("dev", dev_tsv)):
            _bertprep(
                ["task", "classification", "--glue", "sst2", "--input", str(tsv), "--split", split, "--vocab", vocab]
                + ["--output", str(root / f"sst2_{split}"), "--max-seq-length", "64", "--overwrite"]
            )
    if wheels:
        download_wheels(root / "wheels")
    info = {
        "length": length,
        "max_predictions": preds,
        "vocab_size": vocab_size,
        "shards": shards.name,
        "real_shards": real,
        "sst2_train_rows": train_rows,
        "prepare_seconds": round(time.perf_counter() - t0, 1),
        "mib": round(folder_bytes(root) / 2**20, 1),
    }
    (root / "carry.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def download_wheels(dest: Path) -> list[str]:
    """``pip download`` the ``CARRIED`` wheels at the versions installed here (pure Python: any device's Python)."""
    pins = {name: md.version(name) for name in CARRIED}
    download(pins, dest)
    return [f"{n}=={v}" for n, v in pins.items()]


# --- the loader against BERT-base's demand (CPU rehearsal) ---------------------------------------------------


def loader_rate(data: Path, batch_size: int, workers: int, masking: str, seconds: float) -> float:
    """Collated batches of real shards per second, as ``berttrain pretrain`` builds its loader; epochs repeat."""
    from bertstream.trainer.data import DataConfig, PretrainingLoader

    cfg = DataConfig(paths=(str(data),), batch_size=batch_size, num_workers=workers, masking=masking)
    loader = PretrainingLoader(cfg, expected_vocab_sha256=None)
    n, t0, first = 0, time.perf_counter(), None
    while time.perf_counter() - t0 < seconds:
        for batch in loader:
            if first is None:  # worker start-up is not the steady rate
                first = time.perf_counter()
                continue
            n += len(batch["input_ids"])
            if time.perf_counter() - t0 >= seconds:
                break
    return n / max(time.perf_counter() - (first or t0), 1e-9)


# --- (c) the real pretraining command -----------------------------------------------------------------------


def steady_rate(run_dir: Path, skip: int) -> dict[str, Any]:
    """Sequences/s of the training log intervals after the first ``skip`` (compilation, worker start-up).

    Every interval has the same steps and batch, so the rate over them is their harmonic mean."""
    from bertstream.trainer.metrics import read_metrics

    train = [r for r in read_metrics(run_dir) if r.get("split", "train") == "train"]
    kept = train[skip:] or train[-1:]
    rate = len(kept) / sum(1 / r["seq_per_s"] for r in kept)
    mfu = [r["mfu"] for r in kept if "mfu" in r]
    hfu = [r["hfu"] for r in kept if "hfu" in r]
    tokens = sum(r.get("tokens", 0) for r in kept)
    slots = sum(r.get("slots", 0) for r in kept)
    return {
        "seq_per_s": round(rate, 1),
        "intervals": len(kept),
        "mfu": round(statistics.median(mfu), 4) if mfu else None,  # over real tokens
        "hfu": round(statistics.median(hfu), 4) if hfu else None,  # over every position computed
        "padding_share": round(1 - tokens / slots, 4) if slots else None,
        "peak_source": kept[-1].get("peak_source"),
        "last_loss": round(train[-1]["loss"], 4),
        "last_step": train[-1]["step"],
    }


def pretrain_rates(
    carry: Path,
    work: Path,
    logs: Path,
    *,
    preset: str,
    batch_size: int,
    steps: int,
    log_every: int,
    workers: int,
    compile_: bool,
    precision: str,
    max_minutes: float,
    deadline: float,
    site: Path | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Static, then dynamic masking; a run that would start after ``deadline`` (time.monotonic) is skipped."""
    info = json.loads((carry / "carry.json").read_text())
    rows, stderrs = [], []
    for masking in ("static", "dynamic"):
        out = work / f"pretrain_{masking}"
        if time.monotonic() > deadline:
            rows.append({"masking": masking, "skipped": "part c's time share spent"})
            continue
        args = ["bertstream.trainer", "pretrain", "--data", str(carry / info["shards"]), "--model", preset]
        args += ["--output", str(out), "--overwrite", "--batch-size", str(batch_size), "--max-steps", str(steps)]
        args += ["--log-every", str(log_every), "--num-workers", str(workers), "--masking", masking]
        args += ["--precision", precision, "--warmup-steps", str(max(1, steps // 10)), "--no-tensorboard"]
        args += ["--checkpoint-every", str(10 * steps), "--keep-checkpoints", "1"]  # no --eval-data: no evaluation
        args += compile_flags(compile_)  # capped by steps only: --max-minutes reads the clock each step
        timeout = max(deadline - time.monotonic(), 0) + max_minutes * 60 + 180
        rc, wall, err = run_logged(args, logs / f"pretrain_{masking}.log", timeout=timeout, site=site)
        stderrs.append(err)
        row: dict[str, Any] = {"masking": masking, "exit": rc, "wall_s": round(wall, 1), "workers": workers}
        if rc == 0:
            row |= steady_rate(out, skip=1)
            row["command_seq_per_s"] = round(row["last_step"] * batch_size / wall, 1)  # start-up included
            row["checkpoint"] = str(sorted((out / "checkpoints").glob("step-*"))[-1])
        rows.append(row)
    return rows, stderrs


def compile_flags(compile_: bool) -> list[str]:
    """``--compile`` or ``--no-compile`` (issue 52: compiled by default on CUDA), said whichever is asked; where
    this checkout's berttrain predates ``--no-compile``, not compiling is its default and no flag is given."""
    if compile_:
        return ["--compile"]
    from bertstream.trainer.cli import main

    command = main.commands["pretrain"]  # type: ignore[attr-defined]
    flags = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    return ["--no-compile"] if "--no-compile" in flags else []


# --- (d) fine-tuning from (c)'s checkpoint ------------------------------------------------------------------


def finetune_runs(
    carry: Path,
    checkpoint: str,
    work: Path,
    logs: Path,
    *,
    precisions: Sequence[str],
    seeds: Sequence[int],
    epochs: int,
    max_steps: int,
    batch_size: int,
    deadline: float,
    site: Path | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """One run per (precision, seed); a run that would start after ``deadline`` (time.monotonic) is skipped."""
    manifest = json.loads((carry / "sst2_train" / "manifest.json").read_text())
    rows = sum(s["count"] for s in manifest["shards"]) * epochs
    rows = min(rows, max_steps * batch_size) if max_steps else rows
    runs, stderrs = [], []
    for precision in precisions:
        for seed in seeds:
            out = work / f"finetune_{precision}_{seed}"
            if time.monotonic() > deadline:
                runs.append({"precision": precision, "seed": seed, "skipped": "part d's time share spent"})
                continue
            args = ["bertstream.trainer", "finetune", "--init", checkpoint, "--task", "classification"]
            args += ["--train-data", str(carry / "sst2_train"), "--eval-data", str(carry / "sst2_dev")]
            args += ["--output", str(out), "--overwrite", "--epochs", str(epochs), "--seed", str(seed)]
            args += ["--batch-size", str(batch_size), "--lr", "5e-5", "--precision", precision, "--no-tensorboard"]
            args += ["--max-steps", str(max_steps)]
            timeout = max(deadline - time.monotonic(), 0) + 120
            rc, wall, err = run_logged(args, logs / f"finetune_{precision}_{seed}.log", timeout=timeout, site=site)
            stderrs.append(err)
            row: dict[str, Any] = {"precision": precision, "seed": seed, "exit": rc, "wall_s": round(wall, 1)}
            if rc == 0:
                best = json.loads((out / "results.json").read_text())["best"]
                row["dev_accuracy"] = round(best["value"], 4)
                # The whole command's rate: start-up, checkpoint loading and evaluation included, the same for both.
                row["command_seq_per_s"] = round(rows / wall, 1)
            runs.append(row)
    return runs, stderrs


def precision_summary(runs: Sequence[dict[str, Any]], precisions: Sequence[str]) -> dict[str, Any]:
    """Mean dev accuracy per precision, the seeds' spread (max - min within a precision), and whether the
    means differ by no more than the larger spread."""
    out: dict[str, Any] = {}
    for p in precisions:
        acc = [r["dev_accuracy"] for r in runs if r["precision"] == p and "dev_accuracy" in r]
        rate = [r["command_seq_per_s"] for r in runs if r["precision"] == p and "command_seq_per_s" in r]
        if acc:
            out[p] = {
                "mean_accuracy": round(statistics.fmean(acc), 4),
                "spread": round(max(acc) - min(acc), 4),
                "seeds": len(acc),
                "command_seq_per_s": round(statistics.fmean(rate), 1),
            }
    if len(out) == 2:
        a, b = (out[p] for p in precisions)
        out["accuracy_gap"] = round(abs(a["mean_accuracy"] - b["mean_accuracy"]), 4)
        out["within_spread"] = out["accuracy_gap"] <= max(a["spread"], b["spread"])
        out["speedup"] = round(a["command_seq_per_s"] / b["command_seq_per_s"], 3)
    return out
