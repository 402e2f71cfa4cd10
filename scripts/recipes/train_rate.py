"""A pretraining run's throughput: the median of its logged training sequences/s after the first quarter of
its steps (the start-up, the first batches and compilation left out).

    python scripts/recipes/train_rate.py RUN/metrics.jsonl   # prints sequences/s
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def train_rate(metrics: Path) -> float:
    rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    train = [r for r in rows if "seq_per_s" in r and r.get("split", "train") == "train"]
    if not train:
        raise ValueError(f"{metrics} has no training rate (seq_per_s) logged")
    last = max(r["step"] for r in train)
    return statistics.median(r["seq_per_s"] for r in train if r["step"] > last / 4)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("Error: train_rate.py takes one argument, a run's metrics.jsonl", file=sys.stderr)
        return 2
    try:
        print(train_rate(Path(argv[0])))
    except (OSError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
