"""Old against new, per stage, on the same data in one run: sentence segmentation and reading + cleaning
(default), or instance creation and masking (``--instances``).

Segmentation, reading + cleaning: the old code is this repository's at ``--base`` (default: the commit before
the per-byte work), taken with ``git show`` into a temporary folder and imported from there under other module
names; the new code is the checkout's. Both run on the same documents of the shared pretraining text (one copy:
the Wikipedia extracts and six Gutenberg books, 22 MB), interleaved (old, new, old, new, ...), and the best of
``--repeats`` rounds (5 by default) is kept for each, so a busy machine slows both alike. Prints each stage's MB/s
and the ratio new/old, and checks that both give the same output.

    python benchmarks/stage_speed.py
    python benchmarks/stage_speed.py --base b6b896c --repeats 7

Instances (``--instances``), microseconds per instance on one core, pure-Python paths vs kernels: builds one
group's pool from real text (shared Wikipedia ``wiki_0*``, 10 files, ~650 articles, plus the six Gutenberg
novels unless ``--no-books``), tokenized with a 16,000-token vocabulary trained like the tests' ``wiki_vocab``,
then times, in this one process pinned to one core, what the CreateInstances and Mask stages do per work unit
(~250,000 tokens, the default ``tokens_per_unit``) for ``--passes`` dupe passes:

- create + assemble: ``reference_unit_instances`` + ``reference_assemble`` (old) vs ``unit_instances`` +
  ``assemble`` (new);
- masking: the rule's NumPy form, ``reference_mask`` (old), vs its kernel, ``mask`` (new), plain and whole-word;

and prints us/instance, old/new ratios, and the fixed cost of the kernels in a fresh process: importing
numba and the first calls, which load the cached compiled code (``--cold`` also times compiling from an
empty cache). Each timing is the best of ``--repeats`` (3 by default). Outputs are checked equal on the way.

    python benchmarks/stage_speed.py --instances [--passes 3] [--repeats 3] [--max-seq-length 128] [--cold]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: every figure here is per core
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertstream.pipelines.pretraining.instances import (  # noqa: E402
    Pool,
    assemble,
    document_key,
    reference_assemble,
    reference_unit_instances,
    unit_instances,
)
from bertstream.pipelines.pretraining.masking import mask, masking_spec, reference_mask  # noqa: E402
from bertstream.schemas.masking import MaskingSettings  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "pretrain"
BASE = "b6b896c"  # main's head when the per-byte work began
# Old modules, in import order: each imports the ones before it under their old names.
OLD = {
    "bertstream.pipelines.inputs.byte_ranges": "pipelines/inputs/byte_ranges.py",
    "bertstream.pipelines.common.files": "pipelines/common/files.py",
    "bertstream.pipelines.pretraining.read": "pipelines/pretraining/read.py",
    "bertstream.pipelines.pretraining.segmenter": "pipelines/pretraining/segmenter.py",
    "bertstream.pipelines.pretraining.segment": "pipelines/pretraining/segment.py",
}


def old_modules(base: str) -> dict[str, ModuleType]:
    """The modules of ``OLD`` as they were at ``base``, imported as ``old_<name>``; each sees its old
    siblings where it imports them (the rest of the package is the checkout's)."""
    folder = Path(tempfile.mkdtemp(prefix="old_code_"))
    loaded: dict[str, ModuleType] = {}
    saved = {name: sys.modules.get(name) for name in OLD}
    try:
        for name, path in OLD.items():
            src = subprocess.run(
                ["git", "show", f"{base}:{path}"], cwd=REPO, capture_output=True, text=True, check=True
            )
            file = folder / path.replace("/", "_")
            file.write_text(src.stdout)
            spec = importlib.util.spec_from_file_location(f"old_{name}", file)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod  # dataclasses look their module up while the class is made
            spec.loader.exec_module(mod)
            loaded[name] = mod
            sys.modules[name] = mod  # the next old module imports this one
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
    return loaded


def best_of(repeats: int, fns: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best wall time of each function over ``repeats`` interleaved rounds."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


# Run in a fresh process: the kernels' fixed cost, as a Beam worker pays it.
FIXED_COST = """
import time, numpy as np
from bertstream.pipelines.pretraining.instances import Pool, assemble, unit_instances
from bertstream.pipelines.pretraining.masking import mask, MaskingSpec
from bertstream.schemas.masking import MaskingRule, MaskingSettings
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
pool = Pool.build(np.arange(1, 4, dtype=np.uint64), np.array([2, 1, 1]), np.array([3, 4, 2, 5]), np.arange(14, dtype=np.uint16))
raw = unit_instances(pool, 0, 0, 3, 13, 0.1)
ids, offsets, seg_a = assemble(pool, raw, 2, 3)
for ww in (False, True):
    mask(ids, offsets, seg_a, raw.instance_ids, MaskingSpec(MaskingRule(4, np.arange(5, 14), np.zeros(14, bool), MaskingSettings(0.15, 20, ww))))
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
"""


def build_pool(vocab_dir: Path, books: bool):
    from bertstream.pipelines.inputs.read import DocumentBatch, read_documents
    from bertstream.pipelines.pretraining.segment import segment_documents
    from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
    from bertstream.pipelines.tokenizer.load import load_tokenizer
    from bertstream.pipelines.vocab import VocabConfig, train_vocab

    wiki = SHARED / "wikipedia"
    train_vocab([str(wiki / "wiki_0[0-3]")], vocab_dir, VocabConfig(input_format="wikiextractor", vocab_size=16000))
    spec = load_tokenizer(str(vocab_dir / "vocab.txt"))
    files = [(p, "wikiextractor") for p in sorted(wiki.glob("wiki_0*"))]
    if books:
        files += [(p, "text") for p in sorted((SHARED / "gutenberg").glob("*.txt"))]
    docs = []
    for path, fmt in files:
        docs.extend(read_documents(str(path), fmt, Counter()))
    sentences, _ = segment_documents(DocumentBatch(docs))
    batch = DocumentTokenizer(spec)(sentences, Counter())
    keys = np.asarray([document_key(12345, d) for d in batch.doc_ids], dtype=np.uint64)
    pool = Pool.build(keys, batch.doc_sentences, batch.sentence_lengths, batch.ids)
    return Pool.from_bytes(pool.to_bytes()), spec.vocab  # as workers load it: read-only arrays


def work_units(pool: Pool, tokens_per_unit: int) -> list[tuple[int, int]]:
    """Document ranges of about ``tokens_per_unit`` tokens, as the Group stage cuts them."""
    from bertstream.pipelines.pretraining.group import unit_ranges

    return unit_ranges(pool, tokens_per_unit)


def best(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def instances(args: argparse.Namespace) -> None:
    """``--instances``: CreateInstances and Mask per instance, the pure-Python paths against the kernels."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    with tempfile.TemporaryDirectory() as tmp:
        pool, vocab = build_pool(Path(tmp), not args.no_books)
    cls, sep = vocab.id("[CLS]"), vocab.id("[SEP]")
    units = [(p, a, b) for p in range(args.passes) for a, b in work_units(pool, args.tokens_per_unit)]
    mnt, ssp = args.max_seq_length - 3, args.short_seq_prob
    print(
        f"pool: {pool.num_docs} documents, {len(pool.sent_tok) - 1} sentences, {len(pool.ids)} tokens; "
        f"{len(units)} work units ({args.passes} passes), max_seq_length {args.max_seq_length}"
    )

    def create(make, gather):
        return [gather(pool, raw, cls, sep) + (raw,) for raw in (make(pool, p, a, b, mnt, ssp) for p, a, b in units)]

    create(unit_instances, assemble)  # load (or compile) the kernels outside the timings
    t_old, old = best(lambda: create(reference_unit_instances, reference_assemble), args.repeats)
    t_new, new = best(lambda: create(unit_instances, assemble), args.repeats)
    n = sum(len(u[3].instance_ids) for u in new)
    for (ia, oa, sa, ra), (ib, ob, sb, rb) in zip(old, new):
        assert np.array_equal(ra.instance_ids, rb.instance_ids) and np.array_equal(ra.spans, rb.spans)
        assert np.array_equal(ia, ib) and np.array_equal(oa, ob) and np.array_equal(sa, sb)
    rows = [("create + assemble", t_old, t_new)]

    for whole_word in (False, True):
        spec = masking_spec(vocab, MaskingSettings(0.15, 20, whole_word))

        def run(fn, spec=spec):
            return [fn(ids, offsets, seg_a, raw.instance_ids, spec) for ids, offsets, seg_a, raw in new]

        run(mask)
        t_old, m_old = best(lambda: run(reference_mask), args.repeats)
        t_new, m_new = best(lambda: run(mask), args.repeats)
        for a, b in zip(m_old, m_new):
            assert all(
                np.array_equal(getattr(a, f), getattr(b, f)) for f in ("ids", "positions", "labels", "pred_offsets")
            )
        rows.append(("mask, whole-word" if whole_word else "mask", t_old, t_new))

    print(f"{n} instances; us per instance on one core (best of {args.repeats}):")
    print(f"  {'stage':<22}{'old':>9}{'new':>9}{'ratio':>8}")
    for name, t_old, t_new in rows:
        print(f"  {name:<22}{1e6 * t_old / n:>9.2f}{1e6 * t_new / n:>9.2f}{t_old / t_new:>7.1f}x")
    for label, picked in (("create + assemble + mask", rows[:2]), ("create + assemble + mask, whole-word", rows[::2])):
        t_old, t_new = sum(r[1] for r in picked), sum(r[2] for r in picked)
        print(f"  {label}: {1e6 * t_old / n:.2f} -> {1e6 * t_new / n:.2f} us, {t_old / t_new:.1f}x")

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [("cached", env)]
    if args.cold:
        cold_dir = tempfile.mkdtemp()
        runs.insert(0, ("cold (empty cache)", {**env, "NUMBA_CACHE_DIR": cold_dir}))
    for label, e in runs:
        out = subprocess.run([sys.executable, "-c", FIXED_COST], env=e, capture_output=True, text=True, check=True)
        imp, first = (float(x) for x in out.stdout.split())
        print(f"fixed cost per process, {label}: import numba {imp:.2f} s, first kernel calls {first:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=BASE, help="the commit of the old code")
    ap.add_argument("--repeats", type=int, help="rounds; the best counts (default 5; --instances 3)")
    ins = ap.add_argument_group("--instances", "instance creation and masking: pure-Python paths against kernels")
    ins.add_argument("--instances", action="store_true", help="measure these instead of segmenting and reading")
    ins.add_argument("--passes", type=int, default=3)
    ins.add_argument("--max-seq-length", type=int, default=128)
    ins.add_argument("--short-seq-prob", type=float, default=0.1)
    ins.add_argument("--tokens-per-unit", type=int, default=250_000)
    ins.add_argument("--no-books", action="store_true")
    ins.add_argument("--cold", action="store_true", help="also time compiling the kernels from an empty cache")
    args = ap.parse_args()
    if args.instances:
        args.repeats = args.repeats or 3
        return instances(args)
    args.repeats = args.repeats or 5
    if not SHARED.exists():
        raise SystemExit(f"needs the shared data at {SHARED}")
    old = old_modules(args.base)
    from bertstream.pipelines.inputs import read as new_read
    from bertstream.pipelines.inputs.resolve import resolve_inputs
    from bertstream.pipelines.pretraining import segment as new_segment

    files = resolve_inputs([f"wikiextractor:{SHARED}/wikipedia/*", f"text:{SHARED}/gutenberg/*.txt"], "sentences")
    mb = sum(f.bytes for f in files) / 1e6

    def reader(mod: ModuleType) -> Callable[[], list]:
        def read() -> list:
            return [(f.format, list(mod.read_documents(f.path, f.format, Counter()))) for f in files]

        return read

    def segmenter(mod: ModuleType, batches: list) -> Callable[[], list]:
        return lambda: [mod.segment_documents(b) for b in batches]

    rows = []
    r_old, r_new = reader(old["bertstream.pipelines.pretraining.read"]), reader(new_read)
    same = [[(d.doc_id, d.paragraphs, d.presegmented) for d in docs] for _, docs in r_old()] == [
        [(d.doc_id, d.paragraphs, d.presegmented) for d in docs] for _, docs in r_new()
    ]
    t = best_of(args.repeats, {"old": r_old, "new": r_new})
    rows.append(("read + clean", mb, t, same))

    docs = [d for _, ds in r_new() for d in ds]
    batches = [new_read.DocumentBatch(docs[i : i + 50]) for i in range(0, len(docs), 50)]
    text_mb = sum(len(p) for d in docs for p in d.paragraphs) / 1e6
    s_old = segmenter(old["bertstream.pipelines.pretraining.segment"], batches)
    s_new = segmenter(new_segment, batches)
    same = [b[0] for b in s_old()] == [b[0] for b in s_new()]
    t = best_of(args.repeats, {"old": s_old, "new": s_new})
    rows.append(("segment", text_mb, t, same))

    print(f"old: {args.base}; new: the checkout; best of {args.repeats} interleaved rounds")
    print(
        f"{'stage':>14} {'MB':>6} {'old s':>7} {'new s':>7} {'old MB/s':>9} {'new MB/s':>9} {'new/old':>8} {'same':>5}"
    )
    for stage, size, t, same in rows:
        print(
            f"{stage:>14} {size:>6.1f} {t['old']:>7.3f} {t['new']:>7.3f} {size / t['old']:>9.1f} "
            f"{size / t['new']:>9.1f} {t['old'] / t['new']:>7.2f}x {str(same):>5}"
        )


if __name__ == "__main__":
    main()
