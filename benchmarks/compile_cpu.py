"""Does ``torch.compile`` pay on CPU? ``berttrain pretrain --compile`` against ``--no-compile`` on the same
synthetic shards (length 128, 90% full rows, 20 masked), runs interleaved A/B per preset so that drifts in
machine load hit both. Prints, per preset, the whole run's wall time and the steady rate (sequences/s of the
log records after the first) of each, and the ratios compiled/eager: what ``--compile``'s default on CPU is
chosen from (docs/pretraining.md).

    python benchmarks/compile_cpu.py                          # tiny and small, 300 steps, batch 16
    python benchmarks/compile_cpu.py --presets tiny --steps 200 --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(data: Path, out: Path, preset: str, steps: int, batch: int, compiled: bool) -> tuple[float, float]:
    """(wall seconds of the whole process, median seq/s of its log records after the first)."""
    argv = [sys.executable, "-m", "bertstream.trainer", "pretrain", "--data", str(data), "--output", str(out)]
    argv += ["--model", preset, "--max-steps", str(steps), "--batch-size", str(batch), "--log-every", "25"]
    argv += ["--checkpoint-every", str(steps), "--no-tensorboard", "--num-workers", "1", "--overwrite"]
    argv += ["--compile" if compiled else "--no-compile"]
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["seq_per_s"] for r in rows if "seq_per_s" in r][1:]  # the first interval holds compilation
    return wall, statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["tiny", "small"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=1, help="A/B pairs per preset")
    args = ap.parse_args()
    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset

    with tempfile.TemporaryDirectory(prefix="bertstream-compile-") as tmp:
        data = Path(tmp) / "data"
        vocab = bert_like_vocab()
        inst = make_instances(4096, seed=0, vocab=vocab, max_len=128, full_fraction=0.9, max_masked=20)
        write_dataset(data, inst, [1024] * 4, vocab=vocab, rows_per_batch=1000, formats=("arrow",))
        print(f"torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')}, {args.steps} steps of {args.batch_size}")
        for preset in args.presets:
            got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for i in range(args.pairs):
                for compiled in (True, False) if i % 2 == 0 else (False, True):
                    got[compiled].append(run(data, Path(tmp) / "run", preset, args.steps, args.batch_size, compiled))
            c_wall, e_wall = (statistics.median(w for w, _ in got[k]) for k in (True, False))
            c_rate, e_rate = (statistics.median(r for _, r in got[k]) for k in (True, False))
            print(
                f"{preset}: wall compiled {c_wall:.1f} s, eager {e_wall:.1f} s (ratio {c_wall / e_wall:.2f}); "
                f"steady seq/s compiled {c_rate:.1f}, eager {e_rate:.1f} (ratio {c_rate / e_rate:.2f})"
            )


if __name__ == "__main__":
    main()
