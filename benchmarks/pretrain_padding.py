"""Real tokens per second of ``berttrain pretrain`` with and without unpadding, paired, in one run.

Runs the command itself (data loader, step, logging: what a user gets) on the same shards, alternating
``--unpad`` (the default) and ``--no-unpad`` round by round, each in a fresh run folder, and reads its
``metrics.jsonl``: real tokens per second over the logged intervals after the first (start-up and the first
steps' allocations excluded), and the share of computed positions that were padding (1 - tokens/slots).
Prints each round and the ratio of the medians; the speed-up is the unpadded rate over the padded one.

    bertprep pretraining --input 'wikiextractor:/work/shared/data/pretrain/wikipedia/wiki_0[0-3]' \\
        --vocab VOCAB --output /tmp/shards512 --max-seq-length 512 --max-predictions-per-seq 76 --dupe-factor 1
    python benchmarks/pretrain_padding.py /tmp/shards512 --model mini --batch-size 16 --steps 9 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ARMS = {"unpadded": "--unpad", "padded": "--no-unpad"}


def run_once(data: str, out: Path, flag: str, args: argparse.Namespace) -> dict[str, float]:
    """One ``berttrain pretrain`` run: real tokens/s after the first log interval, and its padding share."""
    cmd = [sys.executable, "-m", "bertstream.trainer", "pretrain", "--data", data, "--output", str(out), flag]
    cmd += ["--model", args.model, "--batch-size", str(args.batch_size), "--max-steps", str(args.steps)]
    cmd += ["--log-every", str(args.log_every), "--num-workers", "1", "--no-tensorboard", "--overwrite"]
    cmd += ["--checkpoint-every", str(10 * args.steps), "--warmup-steps", "1", "--seed", str(args.seed)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"Error: {' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if "split" not in r][1:]  # the first interval holds start-up
    if not timed:
        raise SystemExit("Error: too few logged intervals: raise --steps or lower --log-every")
    tokens = sum(r["tokens"] for r in timed)
    seconds = sum(r["tokens"] / r["tokens_per_s"] for r in timed)
    slots = sum(r["slots"] for r in timed)
    return {"tokens_per_s": tokens / seconds, "padding": 1 - tokens / slots, "tokens": tokens}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="bertprep pretraining shards (e.g. length 512 from the shared Wikipedia)")
    ap.add_argument("--model", default="mini")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--log-every", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="pretrain-padding-") as tmp:
        for r in range(args.rounds):
            order = list(ARMS) if r % 2 == 0 else list(reversed(ARMS))  # each arm goes first in turn
            for arm in order:
                res = run_once(args.data, Path(tmp) / arm, ARMS[arm], args)
                results[arm].append(res)
                print(
                    f"round {r + 1} {arm:8}: {res['tokens_per_s']:8.0f} real tokens/s, "
                    f"{res['padding']:.1%} of computed positions padding",
                    flush=True,
                )
    median = {arm: statistics.median(x["tokens_per_s"] for x in results[arm]) for arm in ARMS}
    speedup = median["unpadded"] / median["padded"]
    print(
        f"berttrain pretrain --model {args.model} --batch-size {args.batch_size}, {args.threads} thread(s): "
        f"unpadded {median['unpadded']:.0f}, padded {median['padded']:.0f} real tokens/s (medians of "
        f"{args.rounds}): speed-up {speedup:.2f}x"
    )
    if args.json:
        summary = {"args": vars(args), "rounds": results, "median_tokens_per_s": median, "speedup": speedup}
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
