"""Cost of weighted mixing: samples/s of a 0.7/0.3 mix of two folders against the same two folders read
unweighted (concatenated), measured alternately in one run, one process (num_workers=0), Arrow shards.

Writes a dataset of BERT-like length-128 instances and a copy of it (two folders, the same content) unless
``--data DIR`` is given (then DIR and a copy of it in a temporary folder).

    python benchmarks/mix_throughput.py [--samples 80000] [--data DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertstream.trainer.data import DataConfig, PretrainingLoader  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="existing dataset directory (Arrow shards); default: write one")
    ap.add_argument("--samples", type=int, default=80_000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="epochs per measurement; the best is reported")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bertstream-mix-") as tmp:
        first = Path(args.data) if args.data else Path(tmp) / "a"
        if args.data is None:
            from benchmarks.synthetic_shards import bert_like_vocab, make_instances, write_dataset

            vocab = bert_like_vocab()
            inst = make_instances(args.samples, seed=0, vocab=vocab, max_len=128, full_fraction=0.9, max_masked=20)
            write_dataset(first, inst, [args.samples // 8] * 8, vocab=vocab, rows_per_batch=1000, formats=("arrow",))
        second = Path(tmp) / "b"
        shutil.copytree(first, second)
        paths = (str(first), str(second))
        loaders = {
            name: PretrainingLoader(
                DataConfig(paths=paths, weights=w, batch_size=args.batch_size, format="arrow", verify="size"),
                expected_vocab_sha256=None,
            )
            for name, w in (("unweighted", None), ("0.7/0.3 mix", (0.7, 0.3)))
        }
        best = dict.fromkeys(loaders, 0.0)
        for _ in range(args.repeats):  # alternate, so that load on the machine hits both alike
            for name, ld in loaders.items():
                t = time.perf_counter()
                n = sum(len(b["instance_ids"]) for b in ld)
                best[name] = max(best[name], n / (time.perf_counter() - t))
        print(f"samples/s, one process, batches of {args.batch_size}, best of {args.repeats} epochs:")
        for name, rate in best.items():
            print(f"  {name:<12} {rate:>10,.0f}/s")
        print(f"  mix / unweighted: {best['0.7/0.3 mix'] / best['unweighted']:.2f}x")


if __name__ == "__main__":
    main()
