"""One short GPU run (under 5 minutes on an H200): BERT-base pretraining steps at length 128 in bf16, eager and
``torch.compile``d, with sequences/s and MFU. Also checks the GPU path: losses finite, bf16 autocast, which
attention kernels accept our padding mask, and that two identical steps from the same state agree.

    PYTHONPATH=. python3 benchmarks/gpu_pretrain.py [--batch-size 256] [--steps 30] [--json out.json]

Batches are synthetic but shaped like real shards: ~90% full-length sequences, dynamic padding to the batch's
longest (so T = 128), 20 masked positions. MFU = counted model FLOPs (bertstream.trainer.model_config.pretraining_flops, forward and
backward, at the padded shapes) per second / the device's dense bf16 peak (bertstream.trainer.metrics.device_peak_flops).
Needs only torch (no apache-beam, no transformers): the machine it runs on has no package index.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertstream.trainer.metrics import device_peak_flops  # noqa: E402
from bertstream.trainer.model import BertForPreTraining, mean_losses  # noqa: E402
from bertstream.trainer.model_config import PRESETS, pretraining_flops  # noqa: E402
from bertstream.trainer.optim.table import build_optimizer  # noqa: E402


def make_batch(b: int, t: int, p: int, vocab: int, gen: torch.Generator, device: torch.device) -> dict:
    lengths = torch.where(torch.rand(b, generator=gen) < 0.9, t, torch.randint(t // 4, t, (b,), generator=gen))
    lengths[0] = t  # dynamic padding to the longest
    pos = torch.arange(t)[None, :]
    attn = (pos < lengths[:, None]).long()
    ids = torch.randint(5, vocab, (b, t), generator=gen) * attn
    seg_a = (lengths // 2)[:, None]
    tt = ((pos >= seg_a) & (attn > 0)).long()
    mpos = torch.stack([torch.randperm(int(n) - 2, generator=gen)[:p] + 1 for n in lengths])
    batch = {
        "input_ids": ids,
        "token_type_ids": tt,
        "attention_mask": attn,
        "masked_lm_positions": mpos,
        "masked_lm_ids": torch.randint(5, vocab, (b, p), generator=gen),
        "masked_lm_weights": torch.ones(b, p),
        "next_sentence_labels": torch.randint(0, 2, (b,), generator=gen),
    }
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def run_mode(name: str, compile_: bool, args, device: torch.device) -> dict:
    torch.manual_seed(0)
    config = PRESETS[args.model](args.vocab)
    model = BertForPreTraining(config, seed=0).to(device)
    opt = build_optimizer(model, "adamw", 1e-4, 0.01)
    step_model = torch.compile(model) if compile_ else model
    gen = torch.Generator().manual_seed(1)
    batches = [make_batch(args.batch_size, args.seq, args.masked, args.vocab, gen, device) for _ in range(4)]

    def step(batch: dict) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = mean_losses(step_model(batch))["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(batches[i % len(batches)])
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    losses = []
    start.record()
    for i in range(args.steps):
        losses.append(step(batches[i % len(batches)]))
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000
    flops = pretraining_flops(config, args.seq, args.masked) * args.batch_size * args.steps
    peak = device_peak_flops(device)
    losses_f = [float(x) for x in losses]
    return {
        "mode": name,
        "batch_size": args.batch_size,
        "seq_len": args.seq,
        "steps": args.steps,
        "warmup_seconds": round(warm_s, 1),
        "ms_per_step": round(1000 * seconds / args.steps, 2),
        "seq_per_s": round(args.batch_size * args.steps / seconds),
        "tflops": round(flops / seconds / 1e12, 1),
        "mfu": round(flops / seconds / peak, 4) if peak else None,
        "finite": all(map(lambda x: x == x, losses_f)),
        "first_loss": round(losses_f[0], 4),
        "last_loss": round(losses_f[-1], 4),
        "max_memory_gb": round(torch.cuda.max_memory_allocated(device) / 2**30, 1),
    }


def attention_kernels(device: torch.device) -> dict:
    """Which SDPA backends run with our additive padding mask (bf16, B=8, heads 12, T 128, head 64)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from bertstream.trainer.model import attention_bias

    q = torch.randn(8, 12, 128, 64, device=device, dtype=torch.bfloat16)
    mask = torch.ones(8, 128, device=device, dtype=torch.long)
    mask[1, 100:] = 0
    bias = attention_bias(mask, torch.bfloat16)
    out = {}
    for backend in (
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.MATH,
    ):
        try:
            with sdpa_kernel([backend]):
                torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=bias)
            out[backend.name] = "ok"
        except RuntimeError as e:
            out[backend.name] = f"refused: {str(e).splitlines()[0][:80]}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="base")
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--masked", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark is for a GPU machine")
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    result = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "peak_bf16_tflops": (device_peak_flops(device) or 0) / 1e12,
        "attention_kernels": attention_kernels(device),
        "runs": [run_mode("eager", False, args, device), run_mode("compile", True, args, device)],
    }
    print(json.dumps(result, indent=2))
    for r in result["runs"]:
        print(
            f"{r['mode']:>8}: {r['seq_per_s']} seq/s, {r['tflops']} TFLOP/s, MFU {r['mfu']}, "
            f"{r['ms_per_step']} ms/step, loss {r['first_loss']} -> {r['last_loss']} (target MFU >= 0.55)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
