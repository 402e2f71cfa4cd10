#!/usr/bin/env python3
"""``scripts/recipes/pretraining_ablation.sh``'s last step: ``OUT/ablation.json`` and a Markdown table on stdout.

Each arm's row: what it changes, its steps in the budget, the held-out MLM loss and accuracy at its last
evaluation, and per task the mean ± sd over the seeds of the pretrained model's best-epoch score, with its gain
over the random-init baseline (arm ``base``'s random runs, or the arm's own where it has them: ``layerdecay``
fine-tunes both inits with other settings). An arm whose pretraining has finished but whose fine-tuning has
not (``STOP_AFTER=pretrain``) gets its steps and held-out loss, and "not fine-tuned" in the task cells.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from pretraining_gain_report import ALSO, METRICS, publish
from pretraining_gain_report import mean_sd as fmt

CHANGES = {
    "base": "BERT's settings: masking 0.2, linear decay, batch 64, length 128",
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


def pretrained_only(arm_dir: Path) -> dict | None:
    """An arm pretrained but not fine-tuned: its steps (``recipe.txt``) and last held-out evaluation, else None."""
    recipe, metrics = arm_dir / "recipe.txt", arm_dir / "pretrain" / "metrics.jsonl"
    if not (arm_dir / "pretrain_minutes").is_file() or not recipe.is_file() or not metrics.is_file():
        return None
    fields = dict(f.split("=", 1) for f in recipe.read_text(encoding="utf-8").split() if "=" in f)
    evals = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if '"eval"' in line]
    evals = [e for e in evals if e.get("split") == "eval"]
    held = {"mlm_loss": evals[-1]["mlm_loss"], "mlm_accuracy": evals[-1]["mlm_accuracy"]} if evals else {}
    return {"pretrain_steps": int(fields["steps"]), "heldout": held, "fine_tuned": False}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--budget", type=float, required=True)
    p.add_argument("--arms", nargs="+", required=True)
    args = p.parse_args(argv)
    results = {}
    for arm in args.arms:
        path = args.out / f"arm-{arm}" / "results.json"
        if path.is_file():
            results[arm] = json.loads(path.read_text(encoding="utf-8"))
        elif (partial := pretrained_only(args.out / f"arm-{arm}")) is not None:
            results[arm] = partial
        else:
            print(f"Error: {path} not found: arm {arm} has not finished pretraining", file=sys.stderr)
            return 1
    finished = [a for a in args.arms if results[a].get("fine_tuned", True)]
    if not finished:
        print("Error: no arm has been fine-tuned yet: nothing to compare", file=sys.stderr)
        return 1
    first = results[finished[0]]
    tasks = [t for t in first if isinstance(first[t], dict) and "metric" in first[t]]
    base = results.get("base", {})
    if not base.get("fine_tuned", True) or (base and "random" not in base[tasks[0]]):
        base = {}  # no random-init baseline yet: arms without their own random runs have no gain column
    if not base and any("random" not in results[a][tasks[0]] for a in finished):
        print("Error: arm base has not been fine-tuned: the random-init baseline is missing", file=sys.stderr)
        return 1
    table: dict = {"budget_minutes": args.budget, "arms": {}}
    for arm in args.arms:
        r = results[arm]
        entry = {"steps": r["pretrain_steps"], "heldout": r.get("heldout", {}), "tasks": {}}
        if not r.get("fine_tuned", True):
            entry["fine_tuned"] = False
        else:
            for t in tasks:
                for key in [t, *([t + "_" + ALSO[t]] if t in ALSO else [])]:
                    suffix = "" if key == t else "_" + ALSO[t]
                    pre = r[t][f"pretrained{suffix}"]
                    rnd = r[t].get(f"random{suffix}") or base[t][f"random{suffix}"]
                    entry["tasks"][key] = {
                        "pretrained": pre,
                        "random": rnd,
                        "gain": statistics.mean(pre) - statistics.mean(rnd),
                    }
        table["arms"][arm] = entry
    rows = ablation_table(table, with_baseline=bool(base))
    publish(args.out / "ablation.json", table, rows)
    return 0


def ablation_table(table: dict, *, with_baseline: bool = True) -> list[str]:
    """The rows of an ``ablation.json``: each arm's change, steps, held-out loss and per task its pretrained mean ±
    sd with the gain over random init; then the random-init baseline (arm base's random runs) where it has them.
    Its ``docs/`` copy renders the same rows (scripts/tools/results_tables.py)."""
    arms = table["arms"]
    tuned = [a for a in arms.values() if a.get("fine_tuned", True)]
    keys = list(tuned[0]["tasks"]) if tuned else []

    def title(key: str) -> str:
        task, _, also = key.partition("_")
        return f"{task} {also or METRICS[task]} (gain)"

    rows = [
        "| arm | change | steps | held-out MLM loss / acc |" + "".join(f" {title(k)} |" for k in keys),
        "|---|---|---|---|" + "---|" * len(keys),
    ]
    for arm, entry in arms.items():
        held = entry.get("heldout", {})
        row = f"| {arm} | {CHANGES.get(arm, arm)} | {entry['steps']:,} | "
        row += f"{held.get('mlm_loss', float('nan')):.2f} / {held.get('mlm_accuracy', float('nan')):.3f} |"
        if not entry.get("fine_tuned", True):
            row += " not fine-tuned |" * len(keys)
        else:
            row += "".join(f" {fmt(c['pretrained'])} ({c['gain']:+.3f}) |" for c in (entry["tasks"][k] for k in keys))
        rows.append(row)
    base = arms.get("base", {})
    if with_baseline and base.get("fine_tuned", True) and base.get("tasks"):
        rows.append(
            "| random init | (baseline) | 0 | — |" + "".join(f" {fmt(base['tasks'][k]['random'])} |" for k in keys)
        )
    return rows


if __name__ == "__main__":
    sys.exit(main())
