#!/usr/bin/env python3
"""``scripts/recipes/pretraining_ablation.sh``'s last step: ``OUT/ablation.json`` and a Markdown table on stdout.

Each arm's row: what it changes, its steps in the budget, the held-out MLM loss and accuracy at its last
evaluation, and per task the mean ± sd over the seeds of the pretrained model's best-epoch score, with its gain
over the random-init baseline (arm ``base``'s random runs, or the arm's own where it has them: ``layerdecay``
fine-tunes both inits with other settings).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

CHANGES = {
    "base": "recipe: masking 0.2, linear decay, batch 64, length 128",
    "mlm15": "masking 0.15",
    "mlm30": "masking 0.3",
    "mlm40": "masking 0.4",
    "wsd": "warm-up-stable-decay schedule",
    "batch32": "batch 32",
    "batch128": "batch 128",
    "len64": "length 64 for 70% of the time, then 128",
    "layerdecay": "base's checkpoint; fine-tuning --layer-decay 0.8",
    "recipe": "the kept levers together: length 64 then 128, masking 0.4, warm-up-stable-decay",
}
ALSO = {"mrpc": "accuracy", "squad": "exact_match"}


def fmt(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} ± {sd:.3f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--budget", type=float, required=True)
    p.add_argument("--arms", nargs="+", required=True)
    args = p.parse_args(argv)
    results = {}
    for arm in args.arms:
        path = args.out / f"arm-{arm}" / "results.json"
        if not path.is_file():
            print(f"Error: {path} not found: arm {arm} has not finished", file=sys.stderr)
            return 1
        results[arm] = json.loads(path.read_text(encoding="utf-8"))
    tasks = [
        t
        for t in results[args.arms[0]]
        if isinstance(results[args.arms[0]][t], dict) and "metric" in results[args.arms[0]][t]
    ]
    base_random = {t: results["base"][t]["random"] for t in tasks} if "base" in results else {}
    head = "| arm | change | steps | held-out MLM loss / acc |"
    rule = "|---|---|---|---|"
    for t in tasks:
        metric = results[args.arms[0]][t]["metric"]
        head += f" {t} {metric} (gain) |"
        rule += "---|"
        if t in ALSO:
            head += f" {t} {ALSO[t]} (gain) |"
            rule += "---|"
    rows = [head, rule]
    table = {"budget_minutes": args.budget, "arms": {}}
    for arm in args.arms:
        r = results[arm]
        held = r.get("heldout", {})
        row = f"| {arm} | {CHANGES.get(arm, arm)} | {r['pretrain_steps']:,} | "
        row += f"{held.get('mlm_loss', float('nan')):.2f} / {held.get('mlm_accuracy', float('nan')):.3f} |"
        entry = {"steps": r["pretrain_steps"], "heldout": held, "tasks": {}}
        for t in tasks:
            for key in [t, *([t + "_" + ALSO[t]] if t in ALSO else [])]:
                suffix = "" if key == t else "_" + ALSO[t]
                pre = r[t][f"pretrained{suffix}"]
                rnd = r[t].get(f"random{suffix}") or results["base"][t][f"random{suffix}"]
                gain = statistics.mean(pre) - statistics.mean(rnd)
                row += f" {fmt(pre)} ({gain:+.3f}) |"
                entry["tasks"][key] = {"pretrained": pre, "random": rnd, "gain": gain}
        rows.append(row)
        table["arms"][arm] = entry
    if base_random:
        row = "| random init | (baseline) | 0 | — |"
        for t in tasks:
            row += f" {fmt(results['base'][t]['random'])} |"
            if t in ALSO:
                row += f" {fmt(results['base'][t]['random_' + ALSO[t]])} |"
        rows.append(row)
    (args.out / "ablation.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    print("\n".join(rows))
    print(f"wrote {args.out / 'ablation.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
