"""The GPU suite: one device call of at most 8.5 minutes measures the training step, Hugging Face beside it, the
real pretraining command and fine-tuning; writes one JSON file (device, torch, every figure) and prints a table.

a. The step: BERT-base, bf16 autocast, fused AdamW (``trainer.optim.build_optimizer``), length 128 (batch 256,
   20 masked) and 512 (batch 32, 76 masked), eager and ``torch.compile``d: sequences/s and MFU = counted model
   FLOPs (``trainer.model_config.pretraining_flops`` at the padded shapes) per second over the chip's dense bf16
   peak (``trainer.metrics.device_peak_flops``) and over a large bf16 matrix product's rate measured in the same
   call. Batches as real shards: ~90% full rows, dynamic padding. Which SDPA kernel runs with the padding mask
   (the profiler's op names), which kernels accept it, and what padding costs (eager, length 128: the
   realistic batch against all-full rows with the mask and without any mask).
b. Hugging Face: ``transformers.BertForPreTraining`` (sdpa, same autocast, same optimizer and parameter groups,
   same batches and masked positions: labels -100 elsewhere) at the same shapes and modes; our time over theirs.
   Equal loss: from the same weights (HF's initialisation read by ours, ``trainer.hf.from_hf_state_dict``),
   dropout 0, the same steps, then both models' loss on one held batch (goal: within 0.02).
   Beside them: eager at berttrain's default batch (32), and LAMB at the first shape (eager and compiled).
c. ``berttrain pretrain`` on real shards (``--prepare``), loader workers, static and dynamic masking: its steady
   sequences/s (its own ``metrics.jsonl``) over (a)'s at the same model, batch and mode (goal >= 0.95). Capped
   by steps only (``--max-minutes`` would read the clock, so the device, every step).
d. ``berttrain finetune`` on SST-2 from (c)'s checkpoint, bf16 against fp32, two seeds each: dev accuracy and
   the command's sequences/s.
e. What stops the loop besides the step: a timed checkpoint of the model of (a) with AdamW, written in the loop
   against copied to host memory and written in the background (``benchmarks/checkpoint_stall.py``: the loop's
   stall, goal <= 2 s); and per non-logging step of the real ``berttrain pretrain`` (in this process, two runs
   whose difference cancels start-up), the tensor reads into Python and the CUDA syncs that
   ``torch.cuda.set_sync_debug_mode`` reports (goal 0; ``benchmarks/lib/host_reads.py``).
Each part has a share of the time (``Sizes.budget_s``); a configuration that would start past its part's end is
recorded as skipped, so the call ends in time whatever the chip.

Prepare on a CPU machine (apache-beam and ../shared/data; about a minute), then one device call:

    .venv/bin/python benchmarks/gpu_suite.py --prepare .gpu_carry     # vocab, shards, SST-2, wheels: 12.4 MiB

    # carry [".gpu_carry"], timeout_s 540; the command (one line):
    python3 -m pip install -q --no-index --find-links .gpu_carry/wheels webdataset braceexpand click fsspec
    2>&1 | tail -2; PYTHONPATH=. timeout 510 python3 benchmarks/gpu_suite.py --carry .gpu_carry
    --json $OUT/gpu_suite.json --logs $OUT/logs 2>&1 | tail -60

Rehearsal here: ``python benchmarks/gpu_suite.py --smoke`` (tiny model, CPU, every part's code path, a few
seconds; ``--smoke --compile`` adds the tiny model compiled); tests/benchmarks/test_gpu_suite.py runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.lib import gpu_commands as C  # noqa: E402
from benchmarks.lib.device_python import build_site, device_distributions  # noqa: E402
from benchmarks.train_step import hf_labels, make_batch  # noqa: E402
from bertstream.trainer.metrics import device_peak_flops  # noqa: E402
from bertstream.trainer.model import BertForPreTraining, mean_losses  # noqa: E402
from bertstream.trainer.model_config import PRESETS, BertConfig, pretraining_flops, with_dropout  # noqa: E402
from bertstream.trainer.optim.table import build_optimizer  # noqa: E402
from bertstream.trainer.unpad import plan  # noqa: E402

LOSS_TOLERANCE = 0.02
DEMAND_MFU = 0.45  # the floor at length 128, compiled: the loader must keep up with a step this fast


PARTS = "abcde"


@dataclass(frozen=True, slots=True)
class Sizes:
    preset: str
    vocab: int
    shapes: tuple[tuple[int, int, int], ...]  # (length, batch, masked positions)
    eager_shapes: tuple[tuple[int, int, int], ...]  # eager only: berttrain's default batch (32)
    full_fraction: float  # rows at full length; real length-128 shards: 0.77 (the prepared shards' manifest)
    timed_s: float  # seconds of timed steps per configuration
    warmup: int
    compile: bool
    equal_steps: int
    matmul_n: int
    pretrain_steps: int
    pretrain_minutes: float  # (c) a run's allowance past its part's end: a timeout, the run is capped by steps
    log_every: int
    workers: int
    seeds: tuple[int, ...]
    ft_epochs: int
    ft_max_steps: int  # 0: the epochs
    checkpoint_after: int  # (e) steps at least while a checkpoint is written
    reads_preset: str  # (e) the model of the host-read count (the count does not depend on its size)
    reads_steps: tuple[int, int]  # (e) the two runs' steps: their difference is what one step costs
    budget_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.budget_s) != set(PARTS):
            raise ValueError(f"budget_s needs parts {PARTS}, got {sorted(self.budget_s)}")


# The device call: 470 s of parts in all; compilation of BERT-base is the large unknown (~30-60 s a shape; the inductor
# cache makes (c)'s second compile of the same graph cheaper).
FULL = Sizes(
    preset="base",
    vocab=30522,
    shapes=((128, 256, 20), (512, 32, 76)),
    eager_shapes=((128, 32, 20),),
    full_fraction=0.77,
    timed_s=4.0,
    warmup=3,
    compile=True,
    equal_steps=10,
    matmul_n=8192,
    pretrain_steps=300,
    pretrain_minutes=1.0,
    log_every=20,
    workers=6,
    seeds=(1, 2),
    ft_epochs=1,
    ft_max_steps=250,
    checkpoint_after=20,
    reads_preset="mini",
    reads_steps=(10, 30),
    budget_s={"a": 150, "b": 70, "c": 110, "d": 80, "e": 60},
)
# The CPU rehearsal: a tiny model, the fewest steps that still give each part's figures, one seed a precision;
# shares no loaded machine reaches, so what runs never depends on timing (the smoke test checks every part).
SMOKE = replace(
    FULL,
    **dict(preset="tiny", vocab=2000, shapes=((64, 8, 10), (128, 4, 20)), full_fraction=0.5, timed_s=0.2),
    **dict(warmup=1, compile=False, equal_steps=3, matmul_n=256, pretrain_steps=4, log_every=2, workers=1),
    **dict(seeds=(1,), ft_max_steps=0, budget_s=dict.fromkeys(PARTS, 3600.0), eager_shapes=((64, 4, 10),)),
    **dict(checkpoint_after=2, reads_preset="tiny", reads_steps=(2, 4)),
)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=torch.bfloat16)


class Budget:
    """Each part's end on one schedule from the suite's start: what a part leaves goes to the next, and what it
    overruns comes out of the next, so the call ends near the shares' sum whatever compilation costs."""

    def __init__(self, shares: dict[str, float]) -> None:
        self.shares, self.end = shares, time.monotonic()

    def start(self, part: str) -> None:
        self.end += self.shares[part]

    def left(self) -> float:
        return self.end - time.monotonic()


def batches(
    sizes: Sizes, seq: int, batch: int, masked: int, device: torch.device, full: float, seed: int = 0
) -> list[dict]:
    gen = torch.Generator().manual_seed(seq + 100_003 * seed)  # the same batches for ours and theirs, per length
    out = [make_batch(sizes.vocab, batch, seq, masked, gen, full_fraction=full) for _ in range(3)]
    for b in out:
        b["hf_labels"] = hf_labels(b)
        b.update(plan(b["attention_mask"]))  # the unpadded layout, made on the host as the trainer's loader does
    return [{k: v.to(device) for k, v in b.items()} for b in out]


def real_share(data: list[dict]) -> float:
    return round(float(torch.cat([b["attention_mask"] for b in data]).float().mean()), 4)


def time_steps(step: Callable[[int], torch.Tensor], device: torch.device, warmup: int, seconds: float) -> dict:
    """Warm-up steps (compilation included), then as many timed steps as fill ``seconds``."""
    t0 = time.perf_counter()
    for i in range(warmup):
        step(i)
    sync(device)
    warm = time.perf_counter() - t0
    t1 = time.perf_counter()
    step(warmup)
    sync(device)
    n = max(3, min(500, int(seconds / max(time.perf_counter() - t1, 1e-6))))
    t2 = time.perf_counter()
    losses = [step(warmup + 1 + i) for i in range(n)]
    sync(device)
    dt = (time.perf_counter() - t2) / n
    values = [float(x) for x in losses]
    return {"warmup_s": round(warm, 1), "steps": n, "ms_per_step": round(1000 * dt, 3), "losses": values}


def train_step(
    model: torch.nn.Module,
    call: Callable[[dict], torch.Tensor],
    batch_list: list[dict],
    device: torch.device,
    optimizer: str = "adamw",
) -> Callable[[int], torch.Tensor]:
    """One optimizer step as the trainer takes it: autocast forward, backward, clipping, ``optimizer`` (the
    trainer's table: fused AdamW on CUDA, or LAMB)."""
    opt = build_optimizer(model, optimizer, 1e-4, 0.01)

    def step(i: int) -> torch.Tensor:
        with autocast(device):
            loss = call(batch_list[i % len(batch_list)])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def ours_loss(model: torch.nn.Module) -> Callable[[dict], torch.Tensor]:
    return lambda b: mean_losses(model({k: v for k, v in b.items() if k != "hf_labels"}))["loss"]


def theirs_loss(model: torch.nn.Module) -> Callable[[dict], torch.Tensor]:
    def call(b: dict) -> torch.Tensor:
        return model(
            input_ids=b["input_ids"],
            token_type_ids=b["token_type_ids"],
            attention_mask=b["attention_mask"],
            labels=b["hf_labels"],
            next_sentence_label=b["next_sentence_labels"],
        ).loss

    return call


def hf_model(config: BertConfig, device: torch.device) -> torch.nn.Module:
    import transformers

    from bertstream.trainer.hf.config import hf_config_dict

    transformers.logging.set_verbosity_error()
    hf_cfg = transformers.BertConfig(**hf_config_dict(config))
    hf_cfg._attn_implementation = "sdpa"
    return transformers.BertForPreTraining(hf_cfg).to(device)


def rates(result: dict, config: BertConfig, seq: int, batch: int, masked: int, peaks: dict) -> dict:
    flops = pretraining_flops(config, seq, masked) * batch
    s = result["ms_per_step"] / 1000
    out = {"seq_per_s": round(batch / s, 1), "tflops": round(flops / s / 1e12, 3)}
    out["mfu_spec"] = round(flops / s / peaks["spec"], 4) if peaks["spec"] else None
    out["mfu_matmul"] = round(flops / s / peaks["matmul"], 4)
    return out


# --- (a) ----------------------------------------------------------------------------------------------------


def matmul_rate(n: int, device: torch.device, dtype: torch.dtype, seconds: float) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    reps, t = 0, time.perf_counter()
    while reps < 5 or time.perf_counter() - t < seconds:
        a @ b
        reps += 1
        if reps % 5 == 0:
            sync(device)
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t)


def attention_kernels(model: torch.nn.Module, batch: dict, device: torch.device) -> dict:
    """Which SDPA op the model's forward dispatches to with the padding mask (profiler op names), and which
    backends accept our additive mask when forced."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    from bertstream.trainer.model import attention_bias

    with torch.no_grad(), autocast(device), profile(activities=[ProfilerActivity.CPU]) as prof:
        ours_loss(model)(batch)
    ran = sorted({e.key for e in prof.key_averages() if "scaled_dot_product" in e.key and e.key.startswith("aten::_")})
    t = batch["input_ids"].shape[1]
    heads, head = model.config.num_heads, model.config.head_size
    q = torch.randn(8, heads, t, head, device=device, dtype=torch.bfloat16)
    mask = torch.ones(8, t, device=device, dtype=torch.long)
    mask[1, t // 2 :] = 0
    bias = attention_bias(mask, torch.bfloat16)
    accepted = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with warnings.catch_warnings(record=True) as caught:  # SDPA says why in a warning, then raises
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=bias)
                accepted[backend.name] = "accepts the mask"
            except RuntimeError as e:
                why = [str(w.message).splitlines()[0] for w in caught] or [str(e).splitlines()[0]]
                accepted[backend.name] = "refused: " + " | ".join(why)[:300]
    return {"dispatched_with_mask": ran, "forced": accepted}


def timed_runs(
    sizes: Sizes,
    device: torch.device,
    peaks: dict,
    budget: Budget,
    part: str,
    build: Callable[[], torch.nn.Module],
    loss_of: Callable[[torch.nn.Module], Callable[[dict], torch.Tensor]],
    shapes: tuple[tuple[int, int, int], ...] | None = None,
    eager_only: bool = False,
    optimizer: str = "adamw",
) -> list[dict]:
    """Every shape (``sizes.shapes`` unless ``shapes``), eager and (when ``sizes.compile`` and not
    ``eager_only``) compiled, each on a fresh model from ``build``, stepped by ``optimizer``."""
    config = PRESETS[sizes.preset](sizes.vocab)
    runs: list[dict] = []
    for seq, batch, masked in sizes.shapes if shapes is None else shapes:
        data = batches(sizes, seq, batch, masked, device, sizes.full_fraction)
        for compiled in [False, True] if sizes.compile and not eager_only else [False]:
            row: dict[str, Any] = {"seq_len": seq, "batch": batch, "masked": masked, "compiled": compiled}
            row["optimizer"] = optimizer
            if budget.left() <= 0:
                runs.append(row | {"skipped": f"part {part}'s time share spent"})
                continue
            torch._dynamo.reset()
            model = build()
            call = torch.compile(model) if compiled else model
            step = train_step(model, loss_of(call), data, device, optimizer)
            res = time_steps(step, device, sizes.warmup, sizes.timed_s)
            row |= _summary(res) | rates(res, config, seq, batch, masked, peaks)
            row["real_token_share"] = real_share(data)
            runs.append(row)
            del model, call
    return runs


def part_a(sizes: Sizes, device: torch.device, peaks: dict, budget: Budget) -> dict:
    config = PRESETS[sizes.preset](sizes.vocab)

    def build() -> torch.nn.Module:
        return BertForPreTraining(config, seed=0).to(device)

    runs = timed_runs(sizes, device, peaks, budget, "a", build, ours_loss)
    # berttrain's default batch, eager (what a first run without --batch-size and --compile gets), and LAMB, the
    # large-batch optimizer, at the first shape
    runs += timed_runs(sizes, device, peaks, budget, "a", build, ours_loss, sizes.eager_shapes, eager_only=True)
    runs += timed_runs(sizes, device, peaks, budget, "a", build, ours_loss, sizes.shapes[:1], optimizer="lamb")
    seq, batch, masked = sizes.shapes[0]
    model = BertForPreTraining(config, seed=0).to(device)
    data = batches(sizes, seq, batch, masked, device, sizes.full_fraction)
    kernels = attention_kernels(model, data[0], device)
    padding: dict[str, Any] = {}
    if budget.left() > 0:  # eager, so the three variants cost no recompilation
        full = batches(sizes, seq, batch, masked, device, 1.0)
        no_mask = [b | {"attention_mask": None} for b in full]  # no padding: the model builds no attention bias
        for name, variant in (("padded_with_mask", data), ("full_with_mask", full), ("full_no_mask", no_mask)):
            step = train_step(model, ours_loss(model), variant, device)
            padding[name] = time_steps(step, device, sizes.warmup, sizes.timed_s / 2)["ms_per_step"]
        padding["real_token_share"] = real_share(data)
        padding["mask_cost"] = round(padding["full_with_mask"] / padding["full_no_mask"], 3)
    return {"config": config.to_dict(), "runs": runs, "attention": kernels, "padding_ms_per_step": padding}


def real_shard_rows(sizes: Sizes, carry: Path, device: torch.device, peak: float | None, budget: Budget) -> list[dict]:
    """The step on real shards' batches (the trainer's loader, static masks), eager, at each length the carry has
    shards of: padded (``--no-unpad``), unpadded (the default: on CUDA with attention dropout the attention is
    the dense [B, T] scatter), and unpadded without dropout (varlen Flash Attention on CUDA). MFU counts each
    sequence at its real length (``batch_flops``' useful FLOPs), HFU every position the model computed."""
    from bertstream.trainer.data import PretrainingLoader
    from bertstream.trainer.data.config import DataConfig
    from bertstream.trainer.model_config import batch_flops
    from bertstream.trainer.runtime import to_device
    from bertstream.trainer.unpad import per_sequence, rows

    info = json.loads((carry / "carry.json").read_text())
    out: list[dict] = []
    for length, name in sorted((int(k), v) for k, v in info.get("real_shards", {}).items()):
        batch = next((b for t, b, _ in sizes.shapes if t == length), sizes.shapes[0][1])
        loader = PretrainingLoader(
            DataConfig(paths=(str(carry / name),), batch_size=batch, num_workers=0), expected_vocab_sha256=None
        )
        host = [b for b, _ in zip(loader, range(3))]
        data = [to_device(b, device) for b in host]
        lengths = [b["attention_mask"].sum(1).tolist() for b in host]
        masked = [b["masked_lm_weights"].sum(1).long().tolist() for b in host]
        shapes = [(b["input_ids"].shape[1], b["masked_lm_positions"].shape[1]) for b in host]
        base = PRESETS[sizes.preset](loader.catalog.vocab_size)
        for unpad, dropout in ((False, None), (True, None), (True, 0.0)):
            config = with_dropout(base, dropout)
            row: dict[str, Any] = {"seq_len": length, "batch": batch, "unpad": unpad, "dropout": config.hidden_dropout}
            if budget.left() <= 0:
                out.append(row | {"skipped": "part a's time share spent"})
                continue
            model = BertForPreTraining(config, seed=0, unpad=unpad).to(device)
            res = time_steps(train_step(model, ours_loss(model), data, device), device, sizes.warmup, sizes.timed_s)
            varlen = per_sequence(device, torch.bfloat16, config.attention_dropout, compiled=False)
            flops = [
                batch_flops(config, n, m, shape, rows=rows(sum(n)) if unpad else None, varlen=varlen)
                for n, m, shape in zip(lengths, masked, shapes, strict=True)
            ]
            useful, computed = (sum(f[k] for f in flops) / len(flops) for k in (0, 1))
            s = res["ms_per_step"] / 1000
            tokens = sum(map(sum, lengths)) / len(lengths)
            row |= _summary(res) | {"real_tokens_per_s": round(tokens / s), "attention_per_sequence": varlen}
            row["padding_share"] = round(1 - useful / computed, 4)  # of the FLOPs computed
            row["mfu_spec"] = round(useful / s / peak, 4) if peak else None
            row["hfu_spec"] = round(computed / s / peak, 4) if peak else None
            out.append(row)
            del model
    return out


def _summary(res: dict) -> dict:
    losses = res.pop("losses")
    return res | {
        "finite": all(math.isfinite(x) for x in losses),
        "first_loss": round(losses[0], 4),
        "last_loss": round(losses[-1], 4),
    }


# --- (b) ----------------------------------------------------------------------------------------------------


def part_b(sizes: Sizes, device: torch.device, peaks: dict, budget: Budget, ours: list[dict]) -> dict:
    config = PRESETS[sizes.preset](sizes.vocab)
    equal = equal_loss(sizes, device)
    runs = timed_runs(sizes, device, peaks, budget, "b", lambda: hf_model(config, device), theirs_loss)
    for row in runs:
        mine = next((r for r in ours if _same(r, row) and "ms_per_step" in r), None)
        if "ms_per_step" in row:
            row["ours_over_theirs_time"] = round(mine["ms_per_step"] / row["ms_per_step"], 3) if mine else None
    return {"equal_loss": equal, "runs": runs}


def _same(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in ("seq_len", "batch", "compiled", "optimizer"))


def equal_loss(sizes: Sizes, device: torch.device) -> dict:
    """Same weights (HF's init read by ours), dropout 0, ``equal_steps`` steps each on the same batches, then
    each model's loss on a held batch in eval mode."""
    from bertstream.trainer.hf.convert import from_hf_state_dict

    seq, batch, masked = sizes.shapes[0]
    config = with_dropout(PRESETS[sizes.preset](sizes.vocab), 0.0)
    torch.manual_seed(0)  # HF draws its initialisation from the global generator
    theirs = hf_model(config, device)
    state, fresh, _ = from_hf_state_dict({k: v.cpu() for k, v in theirs.state_dict().items()}, config)
    if fresh:
        raise RuntimeError(f"HF weights did not cover ours: {fresh}")
    ours = BertForPreTraining(config).to(device)
    ours.load_state_dict(state)
    data = batches(sizes, seq, batch, masked, device, sizes.full_fraction)
    held = batches(sizes, seq, batch, masked, device, sizes.full_fraction, seed=1)[0]  # unseen in the steps
    out: dict[str, Any] = {"steps": sizes.equal_steps}
    for name, model, loss in (("ours", ours, ours_loss(ours)), ("theirs", theirs, theirs_loss(theirs))):
        model.eval()
        with torch.no_grad(), autocast(device):
            out[f"{name}_initial"] = round(float(loss(held)), 5)
        model.train()
        step = train_step(model, loss, data, device)
        out[f"{name}_steps"] = [round(float(step(i)), 5) for i in range(sizes.equal_steps)]
        model.eval()
        with torch.no_grad(), autocast(device):
            out[f"{name}_after"] = round(float(loss(held)), 5)
    out["initial_gap"] = round(abs(out["ours_initial"] - out["theirs_initial"]), 5)
    out["gap_after"] = round(abs(out["ours_after"] - out["theirs_after"]), 5)
    out["within_tolerance"] = out["gap_after"] <= LOSS_TOLERANCE
    return out


# --- (c), (d) -----------------------------------------------------------------------------------------------


def part_c(
    sizes: Sizes,
    site: Path | None,
    carry: Path,
    work: Path,
    logs: Path,
    budget: Budget,
    ours: list[dict],
    stderrs: list[str],
) -> dict:
    info = json.loads((carry / "carry.json").read_text())
    # The step's batch at the shards' length (a smoke run over the real carry: its first shape's batch).
    _, batch, _ = next((s for s in sizes.shapes if s[0] == info["length"]), sizes.shapes[0])
    rows, errs = C.pretrain_rates(
        carry,
        work,
        logs,
        preset=sizes.preset,
        batch_size=batch,
        steps=sizes.pretrain_steps,
        log_every=sizes.log_every,
        workers=sizes.workers,
        compile_=sizes.compile,
        precision="bf16",
        max_minutes=sizes.pretrain_minutes,
        deadline=time.monotonic() + budget.left(),
        site=site,
    )
    step = next(
        (
            r
            for r in ours
            if (r["seq_len"], r["batch"]) == (info["length"], batch)
            and r["compiled"] == sizes.compile
            and r.get("optimizer", "adamw") == "adamw"
        ),
        None,
    )
    for row in rows:
        if step and "seq_per_s" in row and "seq_per_s" in step:
            row["over_step"] = round(row["seq_per_s"] / step["seq_per_s"], 3)
            # Derived, not profiled: the share of the command's time the step alone would not need.
            row["gpu_idle_share_derived"] = round(max(0.0, 1 - row["over_step"]), 3)
    stderrs.extend(errs)
    step_rate = step.get("seq_per_s") if step else None
    return {"shards_length": info["length"], "batch": batch, "step_seq_per_s": step_rate, "runs": rows}


def part_d(
    sizes: Sizes,
    site: Path | None,
    carry: Path,
    checkpoint: str | None,
    work: Path,
    logs: Path,
    budget: Budget,
    stderrs: list[str],
) -> dict:
    if checkpoint is None:
        return {"skipped": "no checkpoint from part c"}
    precisions = ("bf16", "fp32")
    runs, errs = C.finetune_runs(
        carry,
        checkpoint,
        work,
        logs,
        precisions=precisions,
        seeds=sizes.seeds,
        epochs=sizes.ft_epochs,
        max_steps=sizes.ft_max_steps,
        batch_size=32,
        deadline=time.monotonic() + budget.left(),
        site=site,
    )
    stderrs.extend(errs)
    return {"runs": runs, "summary": C.precision_summary(runs, precisions)}


# --- (e) ----------------------------------------------------------------------------------------------------


def part_e(sizes: Sizes, carry: Path, work: Path, device: torch.device, budget: Budget) -> dict:
    """What stops the loop besides the step: a checkpoint (written in the loop, and copied then written in the
    background: ``benchmarks/checkpoint_stall.py``) and the host reads and CUDA syncs of a non-logging step of
    the real command (``benchmarks/lib/host_reads.py``). Each in its own try: one failing keeps the other."""
    from benchmarks.checkpoint_stall import measure
    from benchmarks.lib.host_reads import pretrain_reads

    out: dict[str, Any] = {}
    seq, batch, masked = sizes.shapes[0]
    jobs: dict[str, Callable[[], dict]] = {
        "checkpoint": lambda: measure(
            work / "checkpoint_stall",
            preset=sizes.preset,
            device=device,
            batch=min(batch, 32),
            seq=seq,
            warmup=max(sizes.warmup, 3),
            after=sizes.checkpoint_after,
            vocab_size=sizes.vocab,
        ),
        "host_reads": lambda: pretrain_reads(
            carry / json.loads((carry / "carry.json").read_text())["shards"],
            preset=sizes.reads_preset,
            batch_size=min(batch, 32),
            short=sizes.reads_steps[0],
            long=sizes.reads_steps[1],
            device=device,
            flags=C.compile_flags(sizes.compile),
        ),
    }
    for name, job in jobs.items():
        if budget.left() <= 0:
            out[name] = {"skipped": "part e's time share spent"}
            continue
        try:
            out[name] = job()
        except Exception as e:  # noqa: BLE001 - reported in the JSON; the other row still runs
            out[name] = {"error": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-3000:]}
            print(out[name]["traceback"], file=sys.stderr)
    return out


# --- the table ----------------------------------------------------------------------------------------------


def table(result: dict) -> Iterator[str]:
    yield f"{result['device']}, torch {result['torch']}, transformers {result.get('transformers')}"
    p = result["peaks_tflops"]
    yield f"bf16 peak: spec {p['spec']} TFLOP/s, measured {p['matmul']} TFLOP/s ({p['matmul_n']}^3 matmul)"
    yield "part  who     len  batch  mode          seq/s     ms/step  MFU(spec)  MFU(matmul)  ours/theirs"
    for part, who in (("a", "ours"), ("b", "theirs")):
        for r in result.get(part, {}).get("runs", []):
            yield _row(part, who, r)
    for part, lines in (("a", _table_a), ("b", _table_b), ("c", _table_c), ("d", _table_d), ("e", _table_e)):
        if part not in result:
            yield f"{part}: did not run"
        elif "error" in result[part]:
            yield f"{part}: failed: {result[part]['error']}"
        else:
            yield from lines(result[part])
    if "imports" in result:
        imp = result["imports"]
        yield (
            f"imports beyond the device image: {imp['needed_beyond_image']} (carried: {imp['carried']}); "
            f"tried, absent, not needed: {imp['tried_and_absent']}"
        )


def _row(part: str, who: str, r: dict) -> str:
    mode = ("compile" if r["compiled"] else "eager") + ("" if r.get("optimizer", "adamw") == "adamw" else "+lamb")
    if "skipped" in r:
        return f"{part}     {who:<6} {r['seq_len']:>4} {r['batch']:>6}  {mode:<12}  skipped"
    return (
        f"{part}     {who:<6} {r['seq_len']:>4} {r['batch']:>6}  {mode:<12} {r['seq_per_s']:>8.1f} "
        f"{r['ms_per_step']:>10.2f}  {_f(r['mfu_spec'])}  {_f(r['mfu_matmul']):>11}  "
        f"{_f(r.get('ours_over_theirs_time'))}"
    )


def _table_a(a: dict) -> Iterator[str]:
    for r in a.get("real_shards", []):
        what = f"a: real shards, length {r['seq_len']}, batch {r['batch']}, {'unpadded' if r['unpad'] else 'padded'}"
        what += f", dropout {r['dropout']}"
        if "skipped" in r:
            yield f"{what}: skipped"
            continue
        yield (
            f"{what}: {r['real_tokens_per_s']} real tokens/s, MFU {_f(r['mfu_spec']).strip()}, HFU "
            f"{_f(r['hfu_spec']).strip()}, padding {r['padding_share']}, attention per sequence "
            f"{r['attention_per_sequence']}"
        )
    yield f"a: attention with the padding mask: {', '.join(a['attention']['dispatched_with_mask']) or 'n/a'}"
    yield f"a: backends forced with the mask: {a['attention']['forced']}"
    if a["padding_ms_per_step"]:
        pad = a["padding_ms_per_step"]
        yield (
            f"a: padding (eager, ms/step): padded+mask {pad['padded_with_mask']}, full+mask {pad['full_with_mask']}, "
            f"full, no mask {pad['full_no_mask']} (real tokens {pad['real_token_share']})"
        )


def _table_b(b: dict) -> Iterator[str]:
    eq = b["equal_loss"]
    yield (
        f"b: equal loss after {eq['steps']} steps: ours {eq['ours_after']} theirs {eq['theirs_after']} "
        f"gap {eq['gap_after']} (<= {LOSS_TOLERANCE}: {eq['within_tolerance']})"
    )


def _table_c(c: dict) -> Iterator[str]:
    for r in c["runs"]:
        if "skipped" in r:
            yield f"c: berttrain pretrain --masking {r['masking']}: skipped ({r['skipped']})"
            continue
        yield (
            f"c: berttrain pretrain --masking {r['masking']}: exit {r['exit']}, {r.get('seq_per_s')} seq/s steady "
            f"({r.get('over_step')} of the step; goal 0.95), {r.get('command_seq_per_s')} over the whole command"
        )


def _table_d(d: dict) -> Iterator[str]:
    summary = d.get("summary", {})
    for p, s in summary.items():
        if isinstance(s, dict):
            yield (
                f"d: finetune {p}: dev accuracy {s['mean_accuracy']} (spread {s['spread']}, {s['seeds']} seeds), "
                f"{s['command_seq_per_s']} seq/s"
            )
    if "within_spread" in summary:
        yield (
            f"d: bf16/fp32 speed {summary['speedup']}x, accuracy gap {summary['accuracy_gap']} within the spread: "
            f"{summary['within_spread']}"
        )
    if "skipped" in d:
        yield f"d: skipped: {d['skipped']}"


def _table_e(e: dict) -> Iterator[str]:
    c = e.get("checkpoint", {})
    if "error" in c or "skipped" in c:
        yield f"e: checkpoint stall: {c.get('error') or c.get('skipped')}"
    elif c:
        yield (
            f"e: checkpoint of {c['preset']} ({c['checkpoint_mib']} MiB) stalls the loop {c['sync_stall_s']} s written "
            f"in the loop, {c['async_stall_s']} s in the background (the copy {c['async_call_s']} s; goal <= 2 s)"
        )
    r = e.get("host_reads", {})
    if "error" in r or "skipped" in r:
        yield f"e: host reads: {r.get('error') or r.get('skipped')}"
    elif r:
        yield (
            f"e: per non-logging step of berttrain pretrain: {r['host_reads']} tensor reads into Python "
            f"({r['project_reads']} by bertstream), {r['device_reads']} of device tensors, {r['cuda_syncs']} CUDA "
            "syncs (goal 0); where: "
            f"{r['sites_per_step']}"
        )


def _f(x: float | None) -> str:
    return f"{x:9.4f}" if isinstance(x, float) else f"{'-':>9}"


# --- main ---------------------------------------------------------------------------------------------------


def run_suite(sizes: Sizes, carry: Path, logs: Path, device: torch.device, save: Callable[[dict], None]) -> dict:
    """Parts a-d in order; ``save`` gets the results after each part, so a call cut short keeps what ran."""
    import transformers

    torch.backends.cuda.matmul.allow_tf32 = True
    spec = device_peak_flops(device)
    dtype = torch.bfloat16
    peaks = {"spec": spec, "matmul": matmul_rate(sizes.matmul_n, device, dtype, sizes.timed_s)}
    budget = Budget(sizes.budget_s)
    t0 = time.monotonic()
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sizes": {k: getattr(sizes, k) for k in Sizes.__slots__},  # type: ignore[attr-defined]
        "peaks_tflops": {
            "spec": spec and round(spec / 1e12, 1),
            "matmul": round(peaks["matmul"] / 1e12, 3),
            "matmul_n": sizes.matmul_n,
        },
    }
    timings: dict[str, float] = {}

    stderrs: list[str] = []  # the commands' -X importtime output

    def run(part: str, fn: Callable[[], dict]) -> None:
        budget.start(part)
        t = time.monotonic()
        try:
            result[part] = fn()
        except Exception as e:  # one part's failure must not cost the call's other parts
            result[part] = {"error": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-3000:]}
            print(result[part]["traceback"], file=sys.stderr)
        timings[part] = round(time.monotonic() - t, 1)
        result["seconds"] = {"by_part": timings, "total": round(time.monotonic() - t0, 1)}
        save(result)

    run(
        "a",
        lambda: (
            part_a(sizes, device, peaks, budget) | {"real_shards": real_shard_rows(sizes, carry, device, spec, budget)}
        ),
    )
    run("b", lambda: part_b(sizes, device, peaks, budget, result["a"].get("runs", [])))
    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as tmp:  # (c)'s checkpoints: not for $OUT
        work = Path(tmp)
        # The CPU rehearsal runs the commands with only what the GPU machine has (benchmarks/lib/device_python.py).
        site = build_site(work / "device_site") if device.type == "cpu" else None
        run("c", lambda: part_c(sizes, site, carry, work, logs, budget, result["a"].get("runs", []), stderrs))
        ckpt = next((r["checkpoint"] for r in result["c"].get("runs", []) if "checkpoint" in r), None)
        run("d", lambda: part_d(sizes, site, carry, ckpt, work, logs, budget, stderrs))
        run("e", lambda: part_e(sizes, carry, work, device, budget))
    result["imports"] = C.import_report(stderrs, device_distributions() if device.type == "cpu" else None)
    save(result)
    return result


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare", metavar="DIR", help="CPU machine: write the carry folder (shards, SST-2, wheels)")
    ap.add_argument("--shared", default=str(C.REPO.parent / "shared" / "data"), help="with --prepare")
    ap.add_argument("--carry", metavar="DIR", help="the prepared folder (the device call carries it)")
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU: every part's code path")
    ap.add_argument("--compile", action="store_true", help="with --smoke: also torch.compile the tiny model")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--logs", help="the commands' logs (default: beside --json)")
    args = ap.parse_args(argv)
    if args.prepare:
        info = C.prepare(Path(args.prepare), Path(args.shared), smoke=args.smoke, wheels=not args.smoke)
        info["loader_rehearsal"] = loader_rehearsal(Path(args.prepare), info, args.smoke)
        Path(args.prepare, "carry.json").write_text(json.dumps(info, indent=2) + "\n")
        print(json.dumps(info, indent=2))
        return info
    sizes = replace(SMOKE, compile=args.compile) if args.smoke else FULL
    if args.smoke:
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        raise SystemExit("Error: no CUDA device: run with --smoke on a CPU")
    else:
        device = torch.device("cuda")
    with tempfile.TemporaryDirectory(prefix="gpu-suite-carry-") as tmp:
        carry = Path(args.carry) if args.carry else None
        if carry is None:
            if not args.smoke:
                raise SystemExit("Error: --carry DIR (made by --prepare DIR on a CPU machine) is required")
            carry = Path(tmp)
            C.prepare(carry, Path(args.shared), smoke=True, wheels=False)
        logs = Path(args.logs) if args.logs else Path(args.json or tmp).with_suffix("") / "logs"
        result = run_suite(sizes, carry, logs, device, lambda r: save(r, args.json))
    for line in table(result):
        print(line)
    return result


def save(result: dict, path: str | None) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=2) + "\n")


def loader_rehearsal(carry: Path, info: dict, smoke: bool) -> dict:
    """The loader's sequences/s on the prepared shards (this CPU) against what BERT-base would consume at
    ``DEMAND_MFU`` of an H100's dense bf16 peak at length 128: a demand computed from the FLOP count, not a
    measurement of any GPU."""
    import os

    config = PRESETS["base"](info["vocab_size"])
    h100_peak = 989e12
    demand = DEMAND_MFU * h100_peak / pretraining_flops(config, info["length"], info["max_predictions"])
    out: dict[str, Any] = {
        "demand_seq_per_s": round(demand),
        "demand_basis": f"BERT-base at MFU {DEMAND_MFU} of 989 TFLOP/s (H100/H200 dense bf16), length {info['length']}",
        "cpu_cores_here": os.cpu_count(),
    }
    seconds = 1.0 if smoke else 8.0
    for masking in ("static", "dynamic"):
        for workers in (0, 2):
            rate = C.loader_rate(carry / info["shards"], 256, workers, masking, seconds)
            out[f"{masking}_workers{workers}"] = {"seq_per_s": round(rate), "over_demand": round(rate / demand, 2)}
    return out


if __name__ == "__main__":
    main()
