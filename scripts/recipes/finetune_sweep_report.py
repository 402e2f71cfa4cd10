#!/usr/bin/env python3
"""``scripts/recipes/finetune_sweep.sh``'s last step: ``OUT/sweep.json`` and a Markdown table on stdout.

Each cell (task, epochs, learning rate) holds both inits' best-epoch scores over the seeds (runs named
``TASK-lrLR-epE-INIT-SEED``), the gain of the means at that cell, and per task the conservative gain: the
pretrained init's best cell against the random init's best cell, each init at its own best settings.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pretraining_gain_report import ALSO, METRICS, ReportError, best_eval, mean_sd, publish

RUN = re.compile(
    r"^(?P<task>[a-z0-9]+)-lr(?P<lr>[0-9.e+-]+)-ep(?P<epochs>\d+)-(?P<init>pretrained|random)-(?P<seed>\d+)$"
)


def collect(out: Path, names: list[str] | None = None) -> dict:
    """{task: {(epochs, lr): {init: {metric: [...], also: [...]}}}} (a score per seed) from the runs in OUT (those
    named in ``names`` when given: one sweep's cells, not another's left in the folder)."""
    cells: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    for run in sorted(p for p in out.iterdir() if p.is_dir()):
        m = RUN.match(run.name)
        if m is None or (names is not None and run.name not in names):
            continue
        task = m["task"]
        if task not in METRICS:
            raise ReportError(f"{run}: task {task} has no metric here (known: {', '.join(METRICS)})")
        ev = best_eval(run)
        cell = cells[task][(int(m["epochs"]), m["lr"])][m["init"]]
        for key in (METRICS[task], ALSO.get(task)):
            if key is not None:
                cell[key].append(float(ev[key]))
    return cells


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--cells", nargs="+", help="the runs to report (default: every run in OUT)")
    args = p.parse_args(argv)
    try:
        cells = collect(args.out, args.cells)
    except ReportError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if not cells:
        print(f"Error: {args.out} holds no sweep runs (TASK-lrLR-epE-INIT-SEED)", file=sys.stderr)
        return 1
    result: dict = {}
    for task, grid in cells.items():
        metric, also = METRICS[task], ALSO.get(task)
        rows, best = [], {}
        for (epochs, lr), by_init in sorted(grid.items(), key=lambda kv: (kv[0][0], float(kv[0][1]))):
            if set(by_init) != {"pretrained", "random"}:
                print(
                    f"Error: {task} epochs {epochs} lr {lr} lacks the {({'pretrained', 'random'} - set(by_init)).pop()} runs",
                    file=sys.stderr,
                )
                return 1
            pre, rnd = by_init["pretrained"][metric], by_init["random"][metric]
            row = {"epochs": epochs, "lr": float(lr), "pretrained": pre, "random": rnd}
            row["gain"] = statistics.mean(pre) - statistics.mean(rnd)
            if also:
                row[f"pretrained_{also}"], row[f"random_{also}"] = by_init["pretrained"][also], by_init["random"][also]
            rows.append(row)
            for init, xs in (("pretrained", pre), ("random", rnd)):
                if init not in best or statistics.mean(xs) > best[init][0]:
                    best[init] = (statistics.mean(xs), epochs, float(lr))
        result[task] = {
            "metric": metric,
            "cells": rows,
            "best": {k: {"mean": v[0], "epochs": v[1], "lr": v[2]} for k, v in best.items()},
            "conservative_gain": best["pretrained"][0] - best["random"][0],
        }
    lines = sweep_table(result)
    publish(args.out / "sweep.json", result, lines)
    return 0


def lr_text(lr: float) -> str:
    """A rate as the run names spell it (6e-4, 1.5e-4): the cells' rates are floats in the JSON."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def sweep_table(result: dict) -> list[str]:
    """The lines of a ``sweep.json``: per task, each cell's pretrained and random mean ± sd and gain (and the also-
    reported metric's means), then each init at its own best cell. Its ``docs/`` copy renders the same lines
    (scripts/tools/results_tables.py)."""
    lines: list[str] = []
    for task, entry in result.items():
        metric, also = entry["metric"], ALSO.get(task)
        lines += [f"{task} ({metric}{', ' + also if also else ''}: best epoch, mean ± sd over the seeds)", ""]
        head = "| epochs | lr | pretrained | random | gain |" + (
            f" {also}: pretrained / random / gain |" if also else ""
        )
        lines += [head, "|---|---|---|---|---|" + ("---|" if also else "")]
        for c in entry["cells"]:
            line = f"| {c['epochs']} | {lr_text(c['lr'])} | {mean_sd(c['pretrained'])} | {mean_sd(c['random'])} | {c['gain']:+.3f} |"
            if also:
                pa, ra = statistics.mean(c[f"pretrained_{also}"]), statistics.mean(c[f"random_{also}"])
                line += f" {pa:.3f} / {ra:.3f} / {pa - ra:+.3f} |"
            lines.append(line)
        b = entry["best"]
        lines += [
            "",
            f"each init at its own best cell: pretrained {b['pretrained']['mean']:.3f} (epochs "
            f"{b['pretrained']['epochs']}, lr {b['pretrained']['lr']:g}), random {b['random']['mean']:.3f} (epochs "
            f"{b['random']['epochs']}, lr {b['random']['lr']:g}): {entry['conservative_gain']:+.3f}",
            "",
        ]
    return lines


if __name__ == "__main__":
    sys.exit(main())
