#!/usr/bin/env python3
"""``scripts/recipes/pretraining_gain.sh``'s last step: ``OUT/results.json``, a table on stdout, and ``OUT/curve.png``.

``results.json``: ``{"TASK": {"metric": NAME, "pretrained": [one score per seed], "random": [...]}, ...,
"pretrain_minutes": M, ...}``, each score the best epoch's (as ``berttrain finetune`` keeps it), plus
``"curve"``: the curve task's score from each kept pretraining checkpoint, with the held-out MLM loss there
(steps counted over both phases with ``--short-steps``: phase one in ``OUT/pretrain64``, phase two in
``OUT/pretrain`` from its own step 0; a point's minutes from each phase's own time where
``OUT/pretrain64_minutes`` has phase one's),
and with ``--reference``, ``"reference"``: the Hugging Face model's score on each task (first seed); with
``--continued TASK ...``, ``"continued"``: ``{"TASK": {"metric", "before": [...], "after": [...]}, "steps",
"minutes", "epochs"}``, the reference fine-tuned as it is and after continued pretraining on the task text, each
seed. With no ``--tasks`` (a pass of ``ONLY=reference``), only the reference's and the continued figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

METRICS = {"sst2": "accuracy", "mrpc": "f1", "conll": "f1", "squad": "f1"}
ALSO = {"mrpc": "accuracy", "squad": "exact_match"}
# Every score is a fraction. berttrain finetune wrote SQuAD's as percentages before (its results.json said
# "metric_scale": "percent"), and so did the results.json of this report (without "metric_scale"): both are read
# on the one scale.
SCALE = "fraction"


def best(run: Path, metric: str) -> float:
    return float(best_eval(run)[metric])


def best_eval(run: Path) -> dict:
    """The best epoch's evaluation metrics of a ``berttrain finetune`` run."""
    path = run / "results.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        scores = dict(data["best"]["eval"])
        if (data.get("task") or {}).get("metric_scale") == "percent":  # SQuAD of an earlier berttrain
            scores |= {k: scores[k] / 100 for k in ("exact_match", "f1") if k in scores}
        return scores
    except FileNotFoundError:
        raise ReportError(f"{path} not found: that fine-tuning run has not finished (see {run}.log)") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ReportError(f"{path}: not a berttrain finetune result ({e})") from None


class ReportError(RuntimeError):
    """A run the report needs is missing or unreadable."""


def spread(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def mean_sd(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.3f} ± {spread(xs):.3f}"


def publish(path: Path, data: dict, lines: list[str]) -> None:
    """A report's JSON at PATH and its Markdown table on stdout (the ablation's and the sweep's reports too)."""
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"wrote {path}")


def eval_losses(metrics_file: Path) -> dict[int, dict]:
    out = {}
    for line in metrics_file.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("split") == "eval":
            out[int(record["step"])] = record
    return out


def phase_losses(out: Path, short_steps: int) -> dict[int, dict]:
    """Held-out evaluations by step over both phases (phase two's steps shifted past phase one's)."""
    losses = eval_losses(out / "pretrain" / "metrics.jsonl")
    if short_steps <= 0:
        return losses
    merged = {s: r for s, r in eval_losses(out / "pretrain64" / "metrics.jsonl").items() if s <= short_steps}
    merged.update({s + short_steps: r for s, r in losses.items()})
    return merged


def minutes_at(step: int, steps: int, minutes: float, short_steps: int, short_minutes: float | None) -> float:
    """Pretraining minutes spent by ``step``: each phase at its own pace where phase one's time is known."""
    if short_steps <= 0 or short_minutes is None:
        return round(minutes * step / steps, 2)
    if step <= short_steps:
        return round(short_minutes * step / short_steps, 2)
    return round(short_minutes + (minutes - short_minutes) * (step - short_steps) / (steps - short_steps), 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--prep-minutes", type=float, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--short-steps", type=int, default=0, help="Phase one's steps (length 64); 0: one phase.")
    p.add_argument("--curve-task", default="sst2")
    p.add_argument("--curve-steps", type=int, nargs="*", default=[])
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--tasks", nargs="*", default=[], help="The tiny model's tasks; none: the reference's alone.")
    p.add_argument("--inits", nargs="+", default=["pretrained", "random"], choices=["pretrained", "random"])
    p.add_argument("--reference", help="The Hugging Face folder fine-tuned as the upper reference (first seed).")
    p.add_argument("--reference-tasks", nargs="*", help="The reference's tasks (default: --tasks).")
    p.add_argument(
        "--continued", nargs="*", default=[], help="Tasks fine-tuned before and after continued pretraining."
    )
    p.add_argument("--continue-steps", type=int, default=0)
    p.add_argument("--continue-epochs", type=int, default=1)
    args = p.parse_args(argv)
    out, F = args.out, args.out / "finetune"
    results: dict = {"metric_scale": SCALE, "prep_minutes": args.prep_minutes}
    reference_tasks = args.tasks if args.reference_tasks is None else args.reference_tasks
    if args.reference:
        results["reference"] = {"source": args.reference, "seed": args.seeds[0]}
        for task in reference_tasks:
            run = F / f"{task}-reference-{args.seeds[0]}"
            if not (run / "results.json").is_file():  # an optional column: a task not run is shown as such
                results["reference"][task] = None
                continue
            ref = best_eval(run)
            results["reference"][task] = {"metric": METRICS[task], "score": float(ref[METRICS[task]])}
            if task in ALSO:
                results["reference"][task][ALSO[task]] = float(ref[ALSO[task]])
    if not args.tasks:  # the reference's pass: no tiny model was pretrained here
        rows: list[str] = []
        minutes = 0.0
    else:
        minutes = float((out / "pretrain_minutes").read_text())
        results.update(pretrain_minutes=minutes, pretrain_steps=args.steps)
        rows = tiny_table(args, results)
    if args.continued:
        rows += continued_table(args, results, F, out)
    if not args.tasks:
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print("\n".join(rows))
        print(f"wrote {out / 'results.json'}")
        return 0
    return curve(args, results, rows, minutes)


def tiny_table(args: argparse.Namespace, results: dict) -> list[str]:
    """Each task's pretrained and random scores into ``results``; the table's rows."""
    F = args.out / "finetune"
    for task in args.tasks:
        metric = METRICS[task]
        entry: dict = {"metric": metric}
        for init in args.inits:
            evals = [best_eval(F / f"{task}-{init}-{s}") for s in args.seeds]
            entry[init] = [float(e[metric]) for e in evals]
            if task in ALSO:
                entry[f"{init}_{ALSO[task]}"] = [float(e[ALSO[task]]) for e in evals]
        results[task] = entry
    return gain_table(results)


def on_one_scale(results: dict) -> dict:
    """``results`` with SQuAD's scores as fractions: a ``results.json`` without ``"metric_scale"`` holds them as
    percentages, as berttrain reported them then."""
    reference = results.get("reference") or {}
    if results.get("metric_scale") == SCALE or ("squad" not in results and "squad" not in reference):
        return results
    out = json.loads(json.dumps(results))
    squad = out.get("squad") or {}
    for key, value in squad.items():
        if key != "metric" and isinstance(value, list):
            squad[key] = [x / 100 for x in value]
    ref = (out.get("reference") or {}).get("squad")
    if ref:
        ref |= {k: ref[k] / 100 for k in ("score", "exact_match") if k in ref}
    out["metric_scale"] = SCALE
    return out


def gain_table(results: dict) -> list[str]:
    """The table of a ``results.json``: each task's pretrained and random mean ± sd, the gain, the seeds, and the
    reference's score where the run had one (its ``docs/`` copy renders the same rows: scripts/tools/results_tables.py)."""
    results = on_one_scale(results)
    tasks = [
        t for t, v in results.items() if isinstance(v, dict) and "metric" in v and {"pretrained", "random"} & set(v)
    ]
    reference = results.get("reference")
    rows = [
        "| task | metric | pretrained (mean ± sd) | random (mean ± sd) | gain | seeds |"
        + (" reference (1 seed) |" if reference else ""),
        "|---|---|---|---|---|---|" + ("---|" if reference else ""),
    ]
    for task in tasks:
        entry = results[task]
        cells = {
            init: f"{statistics.mean(entry[init]):.4g} ± {spread(entry[init]):.2g}" if init in entry else "not run"
            for init in ("pretrained", "random")
        }
        both = "pretrained" in entry and "random" in entry
        gain = f"{statistics.mean(entry['pretrained']) - statistics.mean(entry['random']):+.3g}" if both else "—"
        seeds = len(entry.get("pretrained", entry.get("random", [])))
        row = f"| {task} | {entry['metric']} | {cells['pretrained']} | {cells['random']} | {gain} | {seeds} |"
        if reference:
            ref = reference.get(task)
            row += " not run |" if ref is None else f" {ref['score']:.4g} |"
        rows.append(row)
    return rows


def continued_table(args: argparse.Namespace, results: dict, F: Path, out: Path) -> list[str]:
    """The reference before and after continued pretraining, each seed, into ``results``; the table's rows."""
    continued: dict = {
        "steps": args.continue_steps,
        "minutes": float((out / "continue_minutes").read_text()),
        "epochs": args.continue_epochs,
    }
    rows = [
        "",
        "| task | metric | reference as it is | after continued pretraining | gain |",
        "|---|---|---|---|---|",
    ]
    for task in args.continued:
        metric = METRICS[task]
        entry = {"metric": metric}
        for which in ("before", "after"):
            entry[which] = [best(F / f"{task}-continued-{which}-{s}", metric) for s in args.seeds]
        continued[task] = entry
        b, a = statistics.mean(entry["before"]), statistics.mean(entry["after"])
        rows.append(
            f"| {task} | {metric} | {b:.4g} ± {spread(entry['before']):.2g} | {a:.4g} ± {spread(entry['after']):.2g} "
            f"| {a - b:+.3g} |"
        )
    results["continued"] = continued
    return rows


def curve(args: argparse.Namespace, results: dict, rows: list[str], minutes: float) -> int:
    """The held-out loss and, with a curve, the curve task's score at each kept checkpoint; writes the files."""
    out, F = args.out, args.out / "finetune"
    # The curve: score against pretraining time (step 0 is the random init of the first seed).
    losses = phase_losses(out, args.short_steps)
    last = max(losses) if losses else None
    if last is not None:
        results["heldout"] = {
            "step": last,
            "mlm_loss": losses[last]["mlm_loss"],
            "mlm_accuracy": losses[last]["mlm_accuracy"],
        }
    if not args.curve_steps or "random" not in args.inits or args.curve_task not in args.tasks:
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print("\n".join(rows))
        print(f"pretraining {minutes:.1f} minutes ({args.steps} steps); no curve")
        print(f"wrote {out / 'results.json'}")
        return 0
    metric = METRICS[args.curve_task]
    seed = args.seeds[0]
    short_file = out / "pretrain64_minutes"
    short_minutes = float(short_file.read_text()) if args.short_steps > 0 and short_file.is_file() else None
    points = [{"step": 0, "minutes": 0.0, "score": best(F / f"{args.curve_task}-random-{seed}", metric)}]
    for s in [*args.curve_steps, args.steps]:
        run = F / (f"curve-{args.curve_task}-step{s}" if s != args.steps else f"{args.curve_task}-pretrained-{seed}")
        point = {
            "step": s,
            "minutes": minutes_at(s, args.steps, minutes, args.short_steps, short_minutes),
            "score": best(run, metric),
        }
        if s in losses:
            point["mlm_loss"], point["mlm_accuracy"] = losses[s]["mlm_loss"], losses[s]["mlm_accuracy"]
        points.append(point)
    results["curve"] = {"task": args.curve_task, "metric": metric, "seed": seed, "points": points}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("\n".join(rows))
    print(f"pretraining {minutes:.1f} minutes ({args.steps} steps), data preparation {args.prep_minutes:.1f} minutes")
    plot(points, args.curve_task, metric, out / "curve.png")
    print(f"wrote {out / 'results.json'} and {out / 'curve.png'}")
    return 0


def plot(points: list[dict], task: str, metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, left = plt.subplots(figsize=(7, 4), dpi=120)
    xs = [max(p["minutes"], 0.5) for p in points]  # log axis: random init drawn at 0.5 minutes
    left.plot(xs, [p["score"] for p in points], "o-", color="tab:blue", label=f"{task} dev {metric}")
    left.axhline(points[0]["score"], color="tab:blue", ls=":", lw=1, label="random init")
    left.set_xscale("log")
    left.set_xlabel("pretraining time, minutes on 2 CPU cores (log; random init at 0.5)")
    left.set_ylabel(f"{task} dev {metric} after fine-tuning", color="tab:blue")
    right = left.twinx()
    with_loss = [(x, p["mlm_loss"]) for x, p in zip(xs, points) if "mlm_loss" in p]
    if with_loss:
        right.plot(*zip(*with_loss), "s--", color="tab:red", label="held-out MLM loss")
    right.set_ylabel("held-out MLM loss (wiki_15)", color="tab:red")
    fig.legend(loc="lower left", bbox_to_anchor=(0.12, 0.15), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ReportError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(1)
