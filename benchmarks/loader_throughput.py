"""Pretraining loader throughput, per worker: samples/s of collated batches (num_workers=0 path).

Writes a dataset of BERT-like length-128 instances (~90% full length, 20 masked positions, vocab
30,522) unless ``--data DIR`` is given, then times full epochs of ``PretrainingLoader`` for Arrow and
WebDataset shards, batches of 256, and prints samples/s, the ratio to the targets (Arrow 50,000/s,
WebDataset 20,000/s), the cost of dynamic masking (``--masking dynamic``, plain and whole-word) as a
ratio to static masks, and the ratio to a reference reader on the same shards in the same run: the stock
``webdataset.WebDataset`` + ``bertstream.schemas.wds.decode_sample`` + a per-sample padding loop, the way a
straightforward loader would be written.

    python benchmarks/loader_throughput.py [--samples 200000] [--data DIR] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import webdataset  # noqa: E402

from bertstream.schemas import wds  # noqa: E402
from bertstream.trainer.data import DataConfig, PretrainingLoader, load_manifest  # noqa: E402

TARGETS = {"arrow": 50_000, "webdataset": 20_000}


def write(root: Path, samples: int, shards: int) -> None:
    from benchmarks.synthetic_shards import bert_like_vocab, make_instances, write_dataset

    t = time.perf_counter()
    vocab = bert_like_vocab()
    inst = make_instances(
        samples, seed=0, vocab=vocab, max_len=128, full_fraction=0.9, max_masked=20, masked_fraction=20 / 128
    )
    counts = [samples // shards + (i < samples % shards) for i in range(shards)]
    write_dataset(root, inst, counts, vocab=vocab, rows_per_batch=1000)
    print(f"wrote {samples:,} instances in {shards} shards per format to {root} ({time.perf_counter() - t:.1f}s)")


def time_loader(
    data: str, fmt: str, verify: str, batch_size: int, repeats: int, profile: bool, **masking: object
) -> float:
    cfg = DataConfig(paths=(data,), batch_size=batch_size, format=fmt, verify=verify, num_workers=0, **masking)
    loader = PretrainingLoader(cfg, expected_vocab_sha256=None)
    best = 0.0
    for r in range(repeats):
        prof = cProfile.Profile() if profile and r == repeats - 1 else None
        t = time.perf_counter()
        if prof:
            prof.enable()
        n = sum(len(b["instance_ids"]) for b in loader)  # one full epoch, shards opened fresh
        if prof:
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
            print(out.getvalue())
        best = max(best, n / (time.perf_counter() - t))
    return best


def time_reference(data: str, batch_size: int, repeats: int) -> float:
    """Stock webdataset + decode_sample + per-sample padding into int64 tensors."""
    import torch

    m = load_manifest(data)
    urls = [f"{data}/{s.path}" for s in m.shards_of("webdataset")]
    pad = m.vocab["special_ids"]["[PAD]"]
    best = 0.0
    for _ in range(repeats):
        ds = webdataset.WebDataset(urls, shardshuffle=False, empty_check=False).map(wds.decode_sample)
        t = time.perf_counter()
        n, buf = 0, []
        for s in ds:
            buf.append(s)
            if len(buf) == batch_size:
                n += _naive_collate(buf, pad, torch)
                buf = []
        best = max(best, n / (time.perf_counter() - t))
    return best


def _naive_collate(rows: list[dict], pad: int, torch) -> int:  # noqa: ANN001
    t = -(-max(len(r["input_ids"]) for r in rows) // 8) * 8
    p = max(len(r["masked_lm_positions"]) for r in rows)
    ids = np.full((len(rows), t), pad, np.int64)
    tt = np.zeros((len(rows), t), np.int64)
    am = np.zeros((len(rows), t), np.int64)
    pos = np.zeros((len(rows), p), np.int64)
    mid = np.zeros((len(rows), p), np.int64)
    w = np.zeros((len(rows), p), np.float32)
    for i, r in enumerate(rows):
        n, k, a = len(r["input_ids"]), len(r["masked_lm_positions"]), r["segment_a_length"]
        ids[i, :n] = r["input_ids"]
        tt[i, a:n] = 1
        am[i, :n] = 1
        pos[i, :k] = r["masked_lm_positions"]
        mid[i, :k] = r["masked_lm_ids"]
        w[i, :k] = 1
    batch = [torch.from_numpy(x) for x in (ids, tt, am, pos, mid, w)]
    return len(batch[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="existing dataset directory (with both formats); default: write one")
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="epochs per measurement; the best is reported")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the last epoch per format")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bertstream-bench-") as tmp:
        data = args.data
        if data is None:
            data = tmp
            write(Path(tmp), args.samples, args.shards)
        formats = load_manifest(data).formats
        print(
            f"\nsamples/s per loader worker (num_workers=0, batches of {args.batch_size}, best of {args.repeats} epochs)"
        )
        results = {}
        for fmt in formats:
            for verify in ("sha256", "size"):
                rate = time_loader(
                    data, fmt, verify, args.batch_size, args.repeats, args.profile and verify == "sha256"
                )
                results[fmt, verify] = rate
                print(
                    f"  {fmt:<10} verify={verify:<6} {rate:>10,.0f}/s   {rate / TARGETS[fmt]:5.2f}x target "
                    f"({TARGETS[fmt]:,}/s)"
                )
        fmt = formats[0]
        for name, masking in (("dynamic", {}), ("dynamic --whole-word-mask", {"whole_word_mask": True})):
            rate = time_loader(data, fmt, "size", args.batch_size, args.repeats, False, masking="dynamic", **masking)
            print(
                f"  {fmt:<10} verify=size   {rate:>10,.0f}/s   masking {name}: {rate / results[fmt, 'size']:5.2f}x static"
            )
        if "webdataset" in formats:
            ref = time_reference(data, args.batch_size, args.repeats)
            print(f"  reference: stock webdataset + decode_sample + per-sample padding: {ref:,.0f}/s")
            for fmt in formats:
                print(f"  {fmt} (verify=sha256) vs reference: {results[fmt, 'sha256'] / ref:5.2f}x")


if __name__ == "__main__":
    main()
