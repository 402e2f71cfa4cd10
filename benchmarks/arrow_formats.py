"""Arrow IPC file format (what `bertprep` writes) against the Arrow stream format (Hugging Face `datasets`'
on-disk format), for the trainer and for `datasets` users: the evidence behind keeping the file format.

Writes one shard of BERT-like length-128 instances in each format (the same instances) unless they exist,
then times, per format: the trainer opening and indexing the shard (`bertstream.trainer.data.shards.open_shard`, what
every epoch does per shard) and a shuffled epoch of `PretrainingLoader` (batches of 256); one record batch
read from the end of the shard (the random access `pyarrow.ipc.open_file` gives and a stream lacks); and the
ways `datasets` opens each: `Dataset.from_file` (stream only), `Dataset(memory-mapped table)` and
`load_dataset("arrow", data_files=...)` (both formats; the latter copies into its cache).

    python benchmarks/arrow_formats.py [--samples 150000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from bertstream.trainer.data import DataConfig, PretrainingLoader  # noqa: E402
from bertstream.trainer.data.shards import open_shard  # noqa: E402
from bertstream.trainer.data.sources import open_catalog  # noqa: E402


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def report(name: str, root: Path) -> None:
    """One line of figures for the dataset ``root/name``."""
    import datasets

    path = str(root / name)
    shard = next((root / name).glob("*.arrow"))
    cat = open_catalog([path], fmt="arrow", expected_vocab_sha256=None, skip_corrupt=False, verify="size")
    ref = cat.shards[0]
    t_open = timed(lambda: open_shard(ref, verify_sha256=False, vocab_sha256=cat.vocab_sha256, id_type=cat.id_type))
    loader = PretrainingLoader(
        DataConfig(paths=(path,), batch_size=256, shuffle=True, num_workers=0), expected_vocab_sha256=None
    )

    def epoch() -> None:
        for _ in loader:
            pass

    t_epoch = timed(epoch, repeat=1)

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
        lambda: datasets.load_dataset("arrow", data_files=str(shard), split="train", cache_dir=cache), repeat=1
    )
    print(
        f"{name:6s}: trainer open_shard {t_open * 1e3:.0f} ms, shuffled epoch {t_epoch:.2f} s "
        f"({loader.num_samples / t_epoch:,.0f} samples/s); last record batch {t_last * 1e3:.1f} ms; "
        f"datasets: from_file {failed or f'{t_from_file * 1e3:.0f} ms'}, Dataset(mapped table) "
        f"{t_mapped * 1e3:.0f} ms, load_dataset('arrow') {t_load:.2f} s (first call: copies into its cache)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=150_000)  # one shard of the pipeline's default size
    ap.add_argument("--dir", help="where the two datasets are written (default: a temporary folder)")
    args = ap.parse_args()
    from benchmarks.synthetic_shards import bert_like_vocab, make_instances, write_dataset

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
