"""The demo's last word on pretraining: the fine-tuned score from the pretrained checkpoint beside the same task
fine-tuned from random weights (``--init random:CHECKPOINT``: that architecture freshly initialised, the same
settings), each the best epoch's of its run's ``results.json``.

    python3 scripts/recipes/init_gain.py PRETRAINED_RUN RANDOM_RUN [--task SST-2]

A figure alone ("SST-2 0.601, majority 0.509") reads as a success; beside the random init's it says whether the
pretraining paid. What it takes to pay (which model, how many steps) is in docs/results.md, "Pretraining that
pays off"; the README quotes it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def best(run: Path) -> tuple[str, float]:
    """``(metric, value)`` of the best epoch of a ``berttrain finetune`` run."""
    b = json.loads((run / "results.json").read_text(encoding="utf-8"))["best"]
    return str(b["metric"]), float(b["value"])


def verdict(task: str, pretrained: tuple[str, float], random: tuple[str, float]) -> str:
    metric, ours = pretrained
    _, theirs = random
    gain = ours - theirs
    said = "pretraining paid" if gain > 0 else "pretraining did not pay at this size"
    return (
        f"{task} dev {metric}: pretrained {ours:.3f}, random init {theirs:.3f} (same architecture and settings): "
        f"{gain:+.3f}, {said} (README: what it takes to beat random init)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pretrained", type=Path)
    ap.add_argument("random", type=Path)
    ap.add_argument("--task", default="the task")
    args = ap.parse_args()
    print(verdict(args.task, best(args.pretrained), best(args.random)))


if __name__ == "__main__":
    main()
