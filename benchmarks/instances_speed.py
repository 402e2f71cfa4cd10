"""Instance creation and masking speed, microseconds per instance on one core: pure-Python paths vs kernels.

Builds one group's pool from real text (shared Wikipedia ``wiki_0*``, 10 files, ~650 articles, plus the six
Gutenberg novels unless ``--no-books``), tokenized with a 16,000-token vocabulary trained like the tests'
``wiki_vocab``, then times, in this one process pinned to one core, what the CreateInstances and Mask
stages do per work unit (~250,000 tokens, the default ``tokens_per_unit``) for ``--passes`` dupe passes:

- create + assemble: ``reference_unit_instances`` + ``reference_assemble`` (old) vs ``unit_instances`` +
  ``assemble`` (new);
- masking: the rule's NumPy form, ``reference_mask`` (old), vs its kernel, ``mask`` (new), plain and whole-word;

and prints us/instance, old/new ratios, and the fixed cost of the kernels in a fresh process: importing
numba and the first calls, which load the cached compiled code (``--cold`` also times compiling from an
empty cache). Each timing is the best of ``--repeats``. Outputs are checked equal on the way.

    python benchmarks/instances_speed.py [--passes 3] [--repeats 3] [--max-seq-length 128] [--cold]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "pretrain"
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

# Run in a fresh process: the kernels' fixed cost, as a Beam worker pays it.
FIXED_COST = """
import time, numpy as np
from bertstream.pipelines.pretraining.instances import Pool, assemble, unit_instances
from bertstream.pipelines.pretraining.masking import mask, MaskingSpec
from bertstream.schemas.masking import MaskingRule
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
pool = Pool.build(np.arange(1, 4, dtype=np.uint64), np.array([2, 1, 1]), np.array([3, 4, 2, 5]), np.arange(14, dtype=np.uint16))
raw = unit_instances(pool, 0, 0, 3, 13, 0.1)
ids, offsets, seg_a = assemble(pool, raw, 2, 3)
for ww in (False, True):
    mask(ids, offsets, seg_a, raw.instance_ids, MaskingSpec(MaskingRule(4, np.arange(5, 14), np.zeros(14, bool), 0.15, 20, ww)))
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
"""


def build_pool(vocab_dir: Path, books: bool):
    from bertstream.pipelines.common.tokenizer import load_tokenizer
    from bertstream.pipelines.inputs.read import DocumentBatch, read_documents
    from bertstream.pipelines.pretraining.segment import segment_documents
    from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--short-seq-prob", type=float, default=0.1)
    ap.add_argument("--tokens-per-unit", type=int, default=250_000)
    ap.add_argument("--no-books", action="store_true")
    ap.add_argument("--cold", action="store_true", help="also time compiling the kernels from an empty cache")
    args = ap.parse_args()
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
        spec = masking_spec(vocab, 0.15, 20, whole_word)

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


if __name__ == "__main__":
    main()
