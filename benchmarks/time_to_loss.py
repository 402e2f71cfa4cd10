"""Time to loss: `berttrain pretrain` against a Hugging Face reference loop, same data, model, schedule and seed.

The reference is what a hand-rolled Hugging Face setup does: ``transformers.BertForPreTraining`` (SDPA
attention) + ``torch.optim.AdamW`` + ``get_linear_schedule_with_warmup``, fed the very batches our trainer sees
(our loader, same seed), each trimmed to its longest row as ``DataCollatorForLanguageModeling`` pads, with
``labels`` -100 except at the masked positions. Both start from the same weights (an HF initialisation saved
once; ours reads it with ``--init-from``), without dropout, with the same parameter groups (no decay on biases
and LayerNorm), Adam eps, clipping and precision, and both get the same wall-clock budget of training time on
this machine. Evaluation time is excluded from both clocks; data loading is included in both.

Prints, for both: held-out MLM loss and accuracy at every evaluation (same steps, so the losses at equal step
count can be compared: they must agree within noise, which shows that the speed does not come from another
objective), the final figures at equal wall time, and the ratio of the times each needs to reach the
reference's final held-out MLM loss (goal: <= 0.5).

    python benchmarks/time_to_loss.py                  # BERT-mini, 8 minutes each (about 17 minutes in all)
    python benchmarks/time_to_loss.py --minutes 2      # a quicker look
Needs ../shared/data (Wikipedia extracts); the shards are built once under --work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertstream.trainer.data import DataConfig, PretrainingLoader  # noqa: E402
from bertstream.trainer.hf.config import hf_config_dict  # noqa: E402
from bertstream.trainer.metrics import read_metrics  # noqa: E402
from bertstream.trainer.model_config import PRESETS  # noqa: E402
from bertstream.trainer.optim.groups import param_groups  # noqa: E402

WIKI = REPO.parent / "shared" / "data" / "pretrain" / "wikipedia"
BIN = Path(sys.executable).parent


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def prepare_data(work: Path, seq: int, preds: int) -> tuple[Path, Path]:
    """A 16k vocabulary and shards: wiki_00..09 to train on, wiki_15 held out (built once, then reused)."""
    vocab, train, held = work / "vocab", work / f"train{seq}", work / f"eval{seq}"
    if not (vocab / "vocab.txt").exists():
        sh(str(BIN / "bertprep"), "vocab", "--input", f"wikiextractor:{WIKI}/wiki_0*", "--vocab-size", "16000",
           "--output", str(vocab))  # fmt: skip
    common = ["--vocab", str(vocab / "vocab.txt"), "--max-seq-length", str(seq), "--max-predictions-per-seq",
              str(preds), "--overwrite"]  # fmt: skip
    if not (train / "manifest.json").exists():
        sh(str(BIN / "bertprep"), "pretraining", "--input", f"wikiextractor:{WIKI}/wiki_0*", "--output", str(train),
           "--dupe-factor", "2", "--num-shards", "4", *common)  # fmt: skip
    if not (held / "manifest.json").exists():
        sh(str(BIN / "bertprep"), "pretraining", "--input", f"wikiextractor:{WIKI}/wiki_15", "--output", str(held),
           "--dupe-factor", "1", "--num-shards", "1", *common)  # fmt: skip
    return train, held


def save_init(work: Path, preset: str, vocab_size: int, seed: int) -> Path:
    """One HF initialisation (no dropout) that both runs start from."""
    import transformers

    folder = work / f"init-{preset}-{seed}"
    if not (folder / "config.json").exists():
        cfg = transformers.BertConfig(**hf_config_dict(PRESETS[preset](vocab_size)))
        cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
        torch.manual_seed(seed)  # HF draws its initialisation from the global generator
        transformers.BertForPreTraining(cfg).save_pretrained(folder, safe_serialization=True)
    return folder


def run_ours(args: argparse.Namespace, train: Path, held: Path, init: Path, out: Path) -> list[dict]:
    """`berttrain pretrain`; returns its eval records, each with the training time spent before it."""
    cmd = [str(BIN / "berttrain"), "pretrain", "--data", str(train), "--eval-data", str(held), "--init-from",
           str(init), "--dropout", "0", "--output", str(out), "--overwrite", "--batch-size", str(args.batch),
           "--lr", str(args.lr), "--warmup-steps", str(args.warmup), "--max-steps", str(args.max_steps),
           "--max-minutes", str(args.minutes), "--log-every", str(args.eval_every), "--eval-every",
           str(args.eval_every), "--eval-batches", str(args.eval_batches), "--checkpoint-every", "1000000",
           "--num-workers", "1", "--precision", args.precision, "--seed", str(args.seed), "--no-tensorboard",
           "--device", "cpu"]  # fmt: skip
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    # Each training record covers the steps since the previous one (evaluation excluded): seqs / seq_per_s.
    clock, evals = 0.0, []
    prev = 0
    for r in read_metrics(out):
        if r.get("split") == "eval":
            evals.append({"step": r["step"], "time": clock, "loss": r["mlm_loss"], "acc": r["mlm_accuracy"]})
        else:
            clock += (r["step"] - prev) * args.batch / r["seq_per_s"]
            prev = r["step"]
    return evals


def hf_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Trim to the longest row (DataCollatorForLanguageModeling's padding); labels -100 except masked positions."""
    n = int(batch["attention_mask"].sum(1).max())
    ids = batch["input_ids"][:, :n]
    labels = torch.full_like(ids, -100)
    rows, cols = (batch["masked_lm_weights"] > 0).nonzero(as_tuple=True)
    labels[rows, batch["masked_lm_positions"][rows, cols]] = batch["masked_lm_ids"][rows, cols].long()
    return {
        "input_ids": ids.long(),
        "token_type_ids": batch["token_type_ids"][:, :n].long(),
        "attention_mask": batch["attention_mask"][:, :n].long(),
        "labels": labels,
        "next_sentence_label": batch["next_sentence_labels"].long(),
    }


@torch.no_grad()
def hf_evaluate(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> tuple[float, float]:
    """Held-out MLM loss (mean over masked tokens) and accuracy, as our trainer's evaluation computes them."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for b in batches:
        logits = model(**{k: v for k, v in b.items() if k not in ("labels", "next_sentence_label")}).prediction_logits
        at = b["labels"] != -100
        picked, gold = logits[at].float(), b["labels"][at]
        loss_sum += float(torch.nn.functional.cross_entropy(picked, gold, reduction="sum"))
        correct += int((picked.argmax(-1) == gold).sum())
        count += int(at.sum())
    model.train()
    return loss_sum / count, correct / count


def run_reference(args: argparse.Namespace, train: Path, held: Path, init: Path) -> list[dict]:
    import transformers
    from transformers import get_linear_schedule_with_warmup

    torch.set_num_threads(args.threads)
    model = transformers.BertForPreTraining.from_pretrained(init, attn_implementation="sdpa")
    model.train()
    optimizer = torch.optim.AdamW(param_groups(model, 0.01), lr=args.lr, eps=1e-6)
    schedule = get_linear_schedule_with_warmup(optimizer, args.warmup, args.max_steps)
    sha = json.loads((train / "manifest.json").read_text())["vocab"]["sha256"]
    # The batches `berttrain pretrain` draws: same DataConfig as trainer.pretrain.inputs.data_loader for one CPU rank.
    loader = PretrainingLoader(
        DataConfig(paths=(str(train),), batch_size=args.batch, num_workers=1, seed=args.seed),
        expected_vocab_sha256=sha,
    )
    held_loader = PretrainingLoader(
        DataConfig(paths=(str(held),), batch_size=args.batch, shuffle=False, num_workers=0),
        expected_vocab_sha256=sha,
    )
    eval_batches = [hf_inputs(b) for _, b in zip(range(args.eval_batches), held_loader)]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    with autocast:
        loss0, acc0 = hf_evaluate(model, eval_batches)  # the shared starting point of both curves
    evals, clock, step = [{"step": 0, "time": 0.0, "loss": loss0, "acc": acc0}], 0.0, 0
    stream = iter(loader)
    while step < args.max_steps and clock < args.minutes * 60:
        t0 = time.perf_counter()
        try:
            batch = next(stream)
        except StopIteration:
            stream = iter(loader)
            batch = next(stream)
        with autocast:
            loss = model(**hf_inputs(batch)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        clock += time.perf_counter() - t0
        if step % args.eval_every == 0 or step >= args.max_steps or clock >= args.minutes * 60:
            with autocast:
                loss_, acc = hf_evaluate(model, eval_batches)
            evals.append({"step": step, "time": clock, "loss": loss_, "acc": acc})
            print(f"[reference] step {step}: eval mlm_loss {loss_:.4f} acc {acc:.4f} ({clock:.0f} s)", flush=True)
    return evals


def time_to(evals: list[dict], target: float) -> float | None:
    """Training time at which the eval curve first reaches ``target`` (linear between evaluations)."""
    prev_t, prev_l = 0.0, None
    for e in evals:
        if e["loss"] <= target:
            if prev_l is None or prev_l == e["loss"]:
                return e["time"]
            return prev_t + (e["time"] - prev_t) * (prev_l - target) / (prev_l - e["loss"])
        prev_t, prev_l = e["time"], e["loss"]
    return None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mini", choices=sorted(PRESETS))
    p.add_argument("--minutes", type=float, default=8.0, help="Training wall time given to each.")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--preds", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=3000, help="Also the end of both linear decays.")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="/tmp/bertstream_time_to_loss")
    args = p.parse_args(argv)
    if not WIKI.is_dir():
        sys.exit(f"Error: needs the shared data at {WIKI} (../shared/data beside the repository)")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    train, held = prepare_data(work, args.seq, args.preds)
    vocab_size = sum(1 for _ in (work / "vocab" / "vocab.txt").open(encoding="utf-8"))
    init = save_init(work, args.preset, vocab_size, args.seed)
    shutil.copy(work / "vocab" / "vocab.txt", init / "vocab.txt")

    ours = run_ours(args, train, held, init, work / "run")
    ref = run_reference(args, train, held, init)
    ours.insert(0, ref[0])  # same weights at step 0: one evaluation serves both

    import transformers

    print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, "
          f"{args.preset}, batch {args.batch} x seq {args.seq}, lr {args.lr}, warmup {args.warmup}, "
          f"decay to step {args.max_steps}, {args.precision}, {args.minutes:g} min of training each")  # fmt: skip
    print(f"{'step':>6} | {'ours: s':>8} {'mlm loss':>9} {'acc':>6} | {'reference: s':>12} {'mlm loss':>9} {'acc':>6}")
    by_step = {e["step"]: e for e in ref}
    diffs = []
    for e in ours:
        r = by_step.get(e["step"])
        right = f"{r['time']:12.0f} {r['loss']:9.4f} {r['acc']:6.3f}" if r else ""
        if r:
            diffs.append(abs(e["loss"] - r["loss"]))
        print(f"{e['step']:6d} | {e['time']:8.0f} {e['loss']:9.4f} {e['acc']:6.3f} | {right}")
    shown = {e["step"] for e in ours}
    for r in ref:
        if r["step"] not in shown:
            print(f"{r['step']:6d} | {'':8} {'':9} {'':6} | {r['time']:12.0f} {r['loss']:9.4f} {r['acc']:6.3f}")
    fo, fr = ours[-1], ref[-1]
    print(f"\nat equal wall time ({args.minutes:g} min): ours step {fo['step']}, mlm loss {fo['loss']:.4f}, acc "
          f"{fo['acc']:.4f}; reference step {fr['step']}, mlm loss {fr['loss']:.4f}, acc {fr['acc']:.4f}")  # fmt: skip
    if diffs:
        print(f"equal steps: {len(diffs)} evaluations compared, max |loss difference| {max(diffs):.4f}, "
              f"mean {sum(diffs) / len(diffs):.4f}")  # fmt: skip
    t_ours = time_to(ours, fr["loss"])
    if t_ours is None:
        print(f"ours never reached the reference's final loss {fr['loss']:.4f}")
    else:
        print(f"time to the reference's final held-out MLM loss {fr['loss']:.4f}: ours {t_ours:.0f} s, reference "
              f"{fr['time']:.0f} s, ratio {t_ours / fr['time']:.3f} (goal <= 0.5)")  # fmt: skip


if __name__ == "__main__":
    main()
