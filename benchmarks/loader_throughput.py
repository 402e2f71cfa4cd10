"""The training data loader: samples/s per worker, the cost of weighted mixing, and the Arrow file format
against the stream format. Three questions, one a run (the first by default).

Per worker (default): writes a dataset of BERT-like length-128 instances (~90% full length, 20 masked positions,
vocab 30,522) unless ``--data DIR`` is given, then times full epochs of ``PretrainingLoader`` (num_workers=0)
for Arrow and WebDataset shards, batches of 256, and prints samples/s, the ratio to the targets (Arrow
50,000/s, WebDataset 20,000/s), the cost of dynamic masking (``--masking dynamic``, plain and whole-word) as a
ratio to static masks, and the ratio to a reference reader on the same shards in the same run: the stock
``webdataset.WebDataset`` + ``bertstream.schemas.wds.decode_sample`` + a per-sample padding loop, the way a
straightforward loader would be written.

``--mix``: samples/s of a 0.7/0.3 mix of two folders against the same two folders read unweighted
(concatenated), measured alternately in one run, one process (num_workers=0), Arrow shards. Writes two datasets
alike (80,000 instances each by default, another seed each: the loader refuses a copy of a dataset given twice).

``--arrow-formats``: Arrow IPC file format (what `bertprep` writes) against the Arrow stream format (Hugging Face
`datasets`' on-disk format), for the trainer and for `datasets` users: the evidence behind keeping the file
format. Writes one shard of BERT-like length-128 instances (150,000 by default) in each format (the same
instances) under ``--dir`` unless they exist, then times, per format: the trainer opening and indexing the shard
(`bertstream.trainer.data.shards.open_shard`, what every epoch does per shard) and a shuffled epoch of
`PretrainingLoader` (batches of 256); one record batch read from the end of the shard (the random access
`pyarrow.ipc.open_file` gives and a stream lacks); and the ways `datasets` opens each: `Dataset.from_file`
(stream only), `Dataset(memory-mapped table)` and `load_dataset("arrow", data_files=...)` (both formats; the
latter copies into its cache).

    python benchmarks/loader_throughput.py [--samples 200000] [--data DIR] [--profile]
    python benchmarks/loader_throughput.py --mix [--samples 80000]
    python benchmarks/loader_throughput.py --arrow-formats [--samples 150000] [--dir DIR]
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

import pyarrow as pa  # noqa: E402
import webdataset  # noqa: E402

from benchmarks.lib.timing import timed  # noqa: E402
from bertstream.schemas import wds  # noqa: E402
from bertstream.trainer.data import DataConfig, PretrainingLoader, load_manifest  # noqa: E402
from bertstream.trainer.data.shards import open_shard  # noqa: E402
from bertstream.trainer.data.sources import open_catalog  # noqa: E402

TARGETS = {"arrow": 50_000, "webdataset": 20_000}


def write(root: Path, samples: int, shards: int) -> None:
    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset

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
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--mix", action="store_true", help="a 0.7/0.3 mix of two folders against them unweighted")
    mode.add_argument("--arrow-formats", action="store_true", help="Arrow IPC file format against stream format")
    ap.add_argument("--data", help="existing dataset directory (with both formats); default: write one")
    ap.add_argument(
        "--samples", type=int, help="instances written (default 200,000; --mix 80,000; --arrow-formats 150,000)"
    )
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="epochs per measurement; the best is reported")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the last epoch per format")
    ap.add_argument("--dir", help="--arrow-formats: where the two datasets are written (default: a temporary folder)")
    args = ap.parse_args()
    if args.mix:
        if args.data:
            sys.exit(
                "Error: --mix writes its own two datasets (the loader refuses one dataset given twice): drop --data"
            )
        args.samples = args.samples or 80_000
        return mix(args)
    if args.arrow_formats:
        args.samples = args.samples or 150_000  # one shard of the pipeline's default size
        return arrow_formats(args)
    args.samples = args.samples or 200_000
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


def mix(args: argparse.Namespace) -> None:
    """``--mix``: the weighted mix against the same folders unweighted."""
    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset

    with tempfile.TemporaryDirectory(prefix="bertstream-mix-") as tmp:
        # Two datasets alike in size and shape, each its own seed: the loader refuses one dataset given twice.
        first, second = Path(tmp) / "a", Path(tmp) / "b"
        vocab = bert_like_vocab()
        for seed, folder in enumerate((first, second)):
            inst = make_instances(args.samples, seed=seed, vocab=vocab, max_len=128, full_fraction=0.9, max_masked=20)
            write_dataset(folder, inst, [args.samples // 8] * 8, vocab=vocab, rows_per_batch=1000, formats=("arrow",))
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


def report(name: str, root: Path) -> None:
    """One line of figures for the dataset ``root/name``."""
    import datasets

    path = str(root / name)
    shard = next((root / name).glob("*.arrow"))
    cat = open_catalog(
        DataConfig(paths=(path,), batch_size=1, format="arrow", verify="size"), expected_vocab_sha256=None
    )
    ref = cat.shards[0]
    t_open = timed(lambda: open_shard(ref, verify_sha256=False, vocab_sha256=cat.vocab_sha256, id_type=cat.id_type))
    loader = PretrainingLoader(
        DataConfig(paths=(path,), batch_size=256, shuffle=True, num_workers=0), expected_vocab_sha256=None
    )

    def epoch() -> None:
        for _ in loader:
            pass

    t_epoch = timed(epoch, runs=1)

    def last_batch() -> None:
        with pa.memory_map(str(shard)) as f:
            if name == "file":
                r = pa.ipc.open_file(f)
                r.get_batch(r.num_record_batches - 1)
            else:  # a stream is read from its start to reach its last batch
                for _ in pa.ipc.open_stream(f):
                    pass

    t_last = timed(last_batch)

    def from_file() -> str:
        try:
            datasets.Dataset.from_file(str(shard))
            return ""
        except Exception as e:  # noqa: BLE001  (the figure is whether it opens)
            return f"fails: {type(e).__name__}"

    failed = from_file()
    t_from_file = timed(from_file) if not failed else None

    def mapped() -> None:
        with pa.memory_map(str(shard)) as f:
            datasets.Dataset((pa.ipc.open_file if name == "file" else pa.ipc.open_stream)(f).read_all())

    t_mapped = timed(mapped)
    cache = tempfile.mkdtemp(prefix="hf_cache_")
    t_load = timed(
        lambda: datasets.load_dataset("arrow", data_files=str(shard), split="train", cache_dir=cache), runs=1
    )
    print(
        f"{name:6s}: trainer open_shard {t_open * 1e3:.0f} ms, shuffled epoch {t_epoch:.2f} s "
        f"({loader.num_samples / t_epoch:,.0f} samples/s); last record batch {t_last * 1e3:.1f} ms; "
        f"datasets: from_file {failed or f'{t_from_file * 1e3:.0f} ms'}, Dataset(mapped table) "
        f"{t_mapped * 1e3:.0f} ms, load_dataset('arrow') {t_load:.2f} s (first call: copies into its cache)"
    )


def arrow_formats(args: argparse.Namespace) -> None:
    """``--arrow-formats``: the file format against the stream format, for the trainer and for ``datasets``."""
    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset

    root = Path(args.dir or tempfile.mkdtemp(prefix="arrow_formats_"))
    vocab = bert_like_vocab(30522)
    for name, stream in (("file", False), ("stream", True)):
        if not (root / name / "manifest.json").exists():
            inst = make_instances(args.samples, vocab=vocab, seed=1)
            write_dataset(root / name, inst, [args.samples], vocab=vocab, formats=("arrow",), arrow_stream=stream)
    print(f"{args.samples:,} instances per shard, {root}")
    import datasets

    datasets.disable_progress_bars()
    for name in ("file", "stream"):
        report(name, root)


if __name__ == "__main__":
    main()
