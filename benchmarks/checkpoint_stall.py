"""How long a checkpoint stops the training loop: written in the loop (``--no-async-checkpoint``) against copied
to host memory and written in the background (the default), in one run, on the same model and disk.

A model of ``--preset`` (base: 110M parameters, 1.3 GB with AdamW's moments) takes real training steps
(``trainer.training.Training``: forward, backward, clipped AdamW step) on a small batch; after ``--warmup`` steps
``checkpoint_writer.CheckpointWriter.save`` is called as the loops call it, then ``--after`` more steps are taken (in the
background mode, more while the write lasts), then the writer's ``finish`` (what the end of a run waits for).
The loop's stall is the time the loop waited for the checkpoint: the ``save`` call plus what ``finish`` still
waited for. Apart from it: how much longer the steps
taken while the thread wrote were than the median step before (the thread shares the cores and the disk; on a
loaded machine this is noise of either sign). ``--copy-only`` (:func:`copy_costs`) takes no steps. The modes
alternate (``--repeats``), and each writes into its own folder under ``--dir`` (the disk being measured). One
writer per mode serves all its checkpoints, as in a run: the first background checkpoint allocates the host
buffers (pinned on CUDA), later ones reuse them (``--repeats 2``: the median is a mid-run checkpoint's).

    python benchmarks/checkpoint_stall.py --dir runs               # base on CPU, written under runs/
    python benchmarks/checkpoint_stall.py --preset mini --after 5  # a quick look
    python benchmarks/checkpoint_stall.py --copy-only              # no steps: a loaded machine

``measure`` is what ``benchmarks/gpu_suite.py`` calls for its timed-checkpoint row.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.train_step import make_batch  # noqa: E402
from bertstream.trainer import runtime as R  # noqa: E402
from bertstream.trainer.checkpoint_writer import CheckpointWriter  # noqa: E402
from bertstream.trainer.distributed import DistInfo  # noqa: E402
from bertstream.trainer.model import BertForPreTraining, mean_losses  # noqa: E402
from bertstream.trainer.model_config import PRESETS  # noqa: E402
from bertstream.trainer.optim.schedule import build_scheduler  # noqa: E402
from bertstream.trainer.optim.table import build_optimizer  # noqa: E402
from bertstream.trainer.snapshot import Background  # noqa: E402
from bertstream.trainer.training import Training  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    root: Path,
    *,
    preset: str = "base",
    device: torch.device | None = None,
    batch: int = 2,
    seq: int = 64,
    warmup: int = 4,
    after: int = 12,
    repeats: int = 1,
    vocab_size: int = 30522,
) -> dict[str, Any]:
    """The loop's stall of one checkpoint of a ``preset`` model with AdamW, written in the loop and in the
    background, alternately ``repeats`` times each, under ``root``: a dict of seconds and the ratio."""
    device = device or torch.device("cpu")
    info = DistInfo(0, 0, 1, device)
    model = BertForPreTraining(PRESETS[preset](vocab_size), seed=0).to(device)
    optimizer = build_optimizer(model, "adamw", 1e-5, 0.01)
    training = Training(model, model, optimizer, build_scheduler(optimizer, 10, 10_000), max_grad_norm=1.0)
    data = {k: v.to(device) for k, v in make_batch(vocab_size, batch, seq, 8, torch.Generator().manual_seed(0)).items()}
    precision = "bf16" if device.type == "cuda" else "fp32"

    def step() -> float:
        start = time.perf_counter()
        with R.autocast(device, precision):
            loss = mean_losses(model(data))["loss"]
        loss.backward()
        training.optimizer_step()
        sync(device)
        return time.perf_counter() - start

    config = {"model": model.config.to_dict()}
    runs: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}
    nbytes = 0
    # one writer per mode for the whole run, as a run has: its host buffers are allocated by its first checkpoint
    writers = {
        mode: CheckpointWriter(config, "[PAD]\n", info, writes=Background() if mode == "async" else None)
        for mode in runs
    }
    for i in range(repeats * 2):
        mode = ("sync", "async")[(i + (i // 2)) % 2]  # sync async async sync sync async ...: order effects cancel
        folder = root / f"{mode}-{i}"
        writer = writers[mode]
        base = statistics.median(step() for _ in range(warmup))
        start = time.perf_counter()
        writer.save(folder, training, {"data": {}}, keep=1)
        sync(device)
        call = time.perf_counter() - start
        during = [step() for _ in range(after)]
        while writer.writes is not None and not writer.writes.done() and len(during) < 50 * after:
            during.append(step())  # training goes on while the thread writes, as a run's would
        start = time.perf_counter()
        writer.finish()
        wait = time.perf_counter() - start
        extra = sum(during) - base * len(during)  # unbiased: a noisy step counts as much below as above
        runs[mode].append({"call_s": call, "steps_extra_s": extra, "finish_wait_s": wait, "step_s": base})
        print(f"[checkpoint_stall] {mode}: {runs[mode][-1]}", file=sys.stderr, flush=True)
        nbytes = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        shutil.rmtree(folder, ignore_errors=True)

    def stall(r: dict[str, float]) -> float:  # what the loop itself waited: the steps' slowdown is apart (noisy)
        return r["call_s"] + r["finish_wait_s"]

    out: dict[str, Any] = {
        "preset": preset,
        "device": str(device),
        "checkpoint_mib": round(nbytes / 2**20, 1),
        "step_s": round(statistics.median(r["step_s"] for rs in runs.values() for r in rs), 3),
    }
    for mode, rs in runs.items():
        out[f"{mode}_stall_s"] = round(statistics.median(stall(r) for r in rs), 2)
        out[f"{mode}_call_s"] = round(statistics.median(r["call_s"] for r in rs), 2)
    out["async_steps_extra_s"] = round(statistics.median(r["steps_extra_s"] for r in runs["async"]), 2)
    out["async_finish_wait_s"] = round(statistics.median(r["finish_wait_s"] for r in runs["async"]), 2)
    out["sync_over_async"] = round(out["sync_stall_s"] / max(out["async_stall_s"], 1e-3), 1)
    return out


def copy_costs(root: Path, *, preset: str = "base", vocab_size: int = 30522) -> dict[str, Any]:
    """Without training steps (for a machine too loaded to time them): one checkpoint written in the loop, then
    two copied and written in the background, each write waited for outside the timed call, the weights changed
    in between: the loop's stall of each, the second with the host buffers of the first reused (a mid-run
    checkpoint's)."""
    info = DistInfo(0, 0, 1, torch.device("cpu"))
    model = BertForPreTraining(PRESETS[preset](vocab_size), seed=0)
    optimizer = build_optimizer(model, "adamw", 1e-5, 0.01)
    training = Training(model, model, optimizer, build_scheduler(optimizer, 10, 10_000), max_grad_norm=1.0)

    def step() -> None:  # AdamW's moments exist, the weights move: what the copy must not see change
        for p in model.parameters():
            p.grad = torch.full_like(p, 1e-3)
        training.optimizer_step()

    step()
    config = {"model": model.config.to_dict()}
    out: dict[str, Any] = {"preset": preset}
    start = time.perf_counter()
    CheckpointWriter(config, "[PAD]\n", info).save(root / "sync", training, {"data": {}}, keep=1)
    out["sync_stall_s"] = round(time.perf_counter() - start, 2)
    out["checkpoint_mib"] = round(sum(p.stat().st_size for p in (root / "sync").rglob("*") if p.is_file()) / 2**20, 1)
    writer = CheckpointWriter(config, "[PAD]\n", info, writes=Background())
    for name in ("async_first_stall_s", "async_reused_stall_s"):
        step()
        start = time.perf_counter()
        writer.save(root / "async", training, {"data": {}}, keep=1)
        out[name] = round(time.perf_counter() - start, 2)
        assert writer.writes is not None
        writer.writes.wait()  # outside the loop's time: steps would cover it
        out[name.replace("stall", "write")] = round(writer.writes.seconds, 2)
        print(f"[checkpoint_stall] {out}", file=sys.stderr, flush=True)
    out["sync_over_async_reused"] = round(out["sync_stall_s"] / max(out["async_reused_stall_s"], 1e-3), 1)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base", choices=sorted(PRESETS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dir", help="Folder on the disk to measure (a temporary folder inside; default: TMPDIR's).")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--after", type=int, default=12, help="Steps taken while the checkpoint is written.")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", help="Also write the figures here.")
    parser.add_argument("--copy-only", action="store_true", help="No training steps: see copy_costs.")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.copy_only:
        with tempfile.TemporaryDirectory(prefix="checkpoint-stall-", dir=args.dir) as tmp:
            result = copy_costs(Path(tmp), preset=args.preset)
        print(
            f"{result['preset']}: checkpoint {result['checkpoint_mib']} MiB; the loop's stall: written in the loop "
            f"{result['sync_stall_s']} s; in the background {result['async_first_stall_s']} s (first: host buffers "
            f"allocated), {result['async_reused_stall_s']} s (buffers reused, as mid-run); "
            f"{result['sync_over_async_reused']}x (goal: <= 2 s)"
        )
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        return
    with tempfile.TemporaryDirectory(prefix="checkpoint-stall-", dir=args.dir) as tmp:
        result = measure(
            Path(tmp),
            preset=args.preset,
            device=torch.device(args.device),
            batch=args.batch,
            seq=args.seq,
            warmup=args.warmup,
            after=args.after,
            repeats=args.repeats,
        )
    print(
        f"{result['preset']} on {result['device']}: checkpoint {result['checkpoint_mib']} MiB, step "
        f"{result['step_s']:.3f} s\n"
        f"  in the loop:       stall {result['sync_stall_s']:.2f} s\n"
        f"  in the background: stall {result['async_stall_s']:.2f} s (the copy {result['async_call_s']:.2f} s, "
        f"left to wait at the end {result['async_finish_wait_s']:.2f} s); the steps while it was written took "
        f"{result['async_steps_extra_s']:.2f} s more than as many before (the thread shares the cores; noisy)\n"
        f"  in the loop / in the background: {result['sync_over_async']}x (goal: background stall <= 2 s)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
