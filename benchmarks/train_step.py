"""CPU training-step benchmark: our BertForPreTraining (unpadded, the default, and padded) vs
transformers.BertForPreTraining, same run.

All three start from the same weights (ours converted from HF's), see the same dynamically padded batch and
the same masked positions (HF gets labels = -100 except at those positions) and take AdamW steps
(forward + backward + optimizer). Steps are interleaved, the order rotating each round, so drifts in machine
load hit all three. Prints ms/step (median, min, mean), real tokens/s, and the ratios of the medians (and of
the minimums, as a noise check): ours/theirs (goal <= 0.8) and unpadded/padded.

    python benchmarks/train_step.py                      # mini, batch 32, seq 128, 20 masked, random tokens
    python benchmarks/train_step.py --preset small --threads 2
    python benchmarks/train_step.py --shards DIR --batch 16   # the first batch of real shards (their T and P)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertstream.trainer.data import PretrainingLoader  # noqa: E402
from bertstream.trainer.data.config import DataConfig  # noqa: E402
from bertstream.trainer.hf.config import hf_config_dict  # noqa: E402
from bertstream.trainer.hf.convert import from_hf_state_dict  # noqa: E402
from bertstream.trainer.model import BertForPreTraining, mean_losses  # noqa: E402
from bertstream.trainer.model_config import PRESETS, batch_flops  # noqa: E402


def make_batch(
    vocab_size: int, batch: int, seq: int, masked: int, generator: torch.Generator, full_fraction: float = 0.0
) -> dict[str, torch.Tensor]:
    """Random tokens with realistic structure: [CLS] A [SEP] B [SEP], lengths in [seq/2, seq], one full row;
    ``full_fraction`` of the rows full length (real length-128 shards: ~0.9; 1.0: no padding at all)."""
    lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=generator)
    if full_fraction:  # drawn only when asked: the default keeps this script's batches as they were
        lengths = torch.where(torch.rand(batch, generator=generator) < full_fraction, seq, lengths)
    lengths[0] = seq
    input_ids = torch.zeros(batch, seq, dtype=torch.long)
    token_type_ids = torch.zeros(batch, seq, dtype=torch.long)
    attention_mask = torch.zeros(batch, seq, dtype=torch.long)
    positions = torch.zeros(batch, masked, dtype=torch.long)
    ids = torch.zeros(batch, masked, dtype=torch.long)
    weights = torch.zeros(batch, masked)
    for b, n in enumerate(lengths.tolist()):
        a_len = n // 2
        input_ids[b, :n] = torch.randint(5, vocab_size, (n,), generator=generator)
        input_ids[b, 0], input_ids[b, a_len - 1], input_ids[b, n - 1] = 2, 3, 3  # [CLS], [SEP], [SEP]
        token_type_ids[b, a_len:n] = 1
        attention_mask[b, :n] = 1
        candidates = torch.tensor([i for i in range(1, n - 1) if i != a_len - 1])
        k = min(masked, max(1, round(0.15 * n)))
        chosen = candidates[torch.randperm(len(candidates), generator=generator)[:k]].sort().values
        positions[b, :k] = chosen
        ids[b, :k] = input_ids[b, chosen]
        weights[b, :k] = 1.0
        input_ids[b, chosen] = 4  # [MASK]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "masked_lm_positions": positions,
        "masked_lm_ids": ids,
        "masked_lm_weights": weights,
        "next_sentence_labels": torch.randint(0, 2, (batch,), generator=generator),
    }


def hf_labels(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    labels = torch.full_like(batch["input_ids"], -100)
    for b in range(labels.shape[0]):
        real = batch["masked_lm_weights"][b] > 0
        labels[b, batch["masked_lm_positions"][b][real]] = batch["masked_lm_ids"][b][real]
    return labels


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="mini", choices=sorted(PRESETS))
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--masked", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shards", help="bertprep pretraining shards: time their first batch (its T and P)")
    args = parser.parse_args(argv)

    import transformers  # benchmark-only dependency (the test extra)

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    batch = shard_batch(args.shards, args.batch) if args.shards else None
    vocab_size = args.vocab_size if batch is None else shard_vocab_size(args.shards)
    config = PRESETS[args.preset](vocab_size)
    hf_cfg = transformers.BertConfig(**hf_config_dict(config))
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(args.seed)  # HF draws its init from the global RNG; ours then copies HF's weights
    theirs = transformers.BertForPreTraining(hf_cfg)
    ours = BertForPreTraining(config)
    state, fresh, _ = from_hf_state_dict(theirs.state_dict(), config)
    assert not fresh, fresh
    ours.load_state_dict(state)
    padded = copy.deepcopy(ours)
    padded.unpad = False

    if batch is None:
        g = torch.Generator().manual_seed(args.seed)
        batch = make_batch(config.vocab_size, args.batch, args.seq, args.masked, g)
    args.batch, args.seq = batch["input_ids"].shape
    args.masked = batch["masked_lm_positions"].shape[1]
    labels = hf_labels(batch)
    hf_inputs = {
        "input_ids": batch["input_ids"],
        "token_type_ids": batch["token_type_ids"],
        "attention_mask": batch["attention_mask"],
        "labels": labels,
        "next_sentence_label": batch["next_sentence_labels"],
    }

    # Same computation check (eval mode: no dropout) before any step changes the weights.
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        loss_ours = mean_losses(ours(batch))["loss"].item()
        loss_theirs = theirs(**hf_inputs).loss.item()
    ours.train()
    theirs.train()

    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-4, weight_decay=0.01)
    opt_padded = torch.optim.AdamW(padded.parameters(), lr=1e-4, weight_decay=0.01)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=1e-4, weight_decay=0.01)

    def step_ours() -> None:
        opt_ours.zero_grad(set_to_none=True)
        mean_losses(ours(batch))["loss"].backward()
        opt_ours.step()

    def step_padded() -> None:
        opt_padded.zero_grad(set_to_none=True)
        mean_losses(padded(batch))["loss"].backward()
        opt_padded.step()

    def step_theirs() -> None:
        opt_theirs.zero_grad(set_to_none=True)
        theirs(**hf_inputs).loss.backward()
        opt_theirs.step()

    def timed(fn: Callable[[], None]) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1000.0

    steps = {"ours": step_ours, "padded": step_padded, "theirs": step_theirs}
    for _ in range(args.warmup):
        for fn in steps.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for i in range(args.steps):
        for name in names[i % 3 :] + names[: i % 3]:  # each goes first, second and third in turn
            times[name].append(timed(steps[name]))

    t_ours, t_padded, t_theirs = times["ours"], times["padded"], times["theirs"]
    med_ours, med_theirs = statistics.median(t_ours), statistics.median(t_theirs)
    med_padded = statistics.median(t_padded)
    tokens = int(batch["attention_mask"].sum())
    lengths = batch["attention_mask"].sum(1).tolist()
    masked = batch["masked_lm_weights"].sum(1).long().tolist()
    flops, _ = batch_flops(config, lengths, masked, (args.seq, args.masked), rows=None, varlen=False)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}")
    print(
        f"config {args.preset} (L{config.num_layers} H{config.hidden_size} A{config.num_heads} V{config.vocab_size}), "
        f"batch {args.batch} x seq {args.seq} ({tokens} real tokens), {int(batch['masked_lm_weights'].sum())} "
        f"masked targets (P={args.masked}), warmup {args.warmup}, timed {args.steps} interleaved"
    )
    diff = abs(loss_ours - loss_theirs)
    print(f"initial loss (eval): ours {loss_ours:.6f}  theirs {loss_theirs:.6f}  diff {diff:.2e}")
    print(
        f"real tokens {tokens} of {args.batch * args.seq} positions ({1 - tokens / (args.batch * args.seq):.1%} padding)"
    )
    for name, t in times.items():
        med = statistics.median(t)
        print(
            f"{name:7}: median {med:8.1f} ms/step  min {min(t):8.1f}  mean {statistics.mean(t):8.1f}  "
            f"{tokens / med * 1000:8.0f} real tokens/s  ({flops / med / 1e6:.1f} useful GFLOP/s)"
        )
    # The median is the headline; the min (least disturbed step) is printed because a shared machine's load
    # lands on single steps: when the two ratios disagree, the run was noisy and should be repeated.
    print(
        f"ratio ours/theirs: median {med_ours / med_theirs:.3f}, min {min(t_ours) / min(t_theirs):.3f}  (goal <= 0.8)"
    )
    print(
        f"speed-up of unpadding (padded/ours): median {med_padded / med_ours:.3f}, min {min(t_padded) / min(t_ours):.3f}"
    )


def shard_batch(shards: str, batch_size: int) -> dict[str, torch.Tensor]:
    """The first batch the trainer's loader makes of ``shards`` (static masks), as ``berttrain pretrain`` sees it."""
    cfg = DataConfig(paths=(shards,), batch_size=batch_size, num_workers=0)
    return next(iter(PretrainingLoader(cfg, expected_vocab_sha256=None)))


def shard_vocab_size(shards: str) -> int:
    return PretrainingLoader(DataConfig(paths=(shards,), batch_size=1), expected_vocab_sha256=None).catalog.vocab_size


if __name__ == "__main__":
    main()
