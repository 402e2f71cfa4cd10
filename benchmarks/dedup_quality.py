"""Duplicate removal on the shared Wikipedia text with injected duplicates: quality and cost, in one run.

Injected (one seed): near copies of 10% of the documents, each with about 5% of its words replaced, and
exact copies of another 5% (case and spacing changed), written to a file that sorts after the originals
(its ids are larger, so the original is the one to keep). Two edit patterns, each its own corpus:

- ``spans``: the replaced words come in runs of 10 (an edited sentence or two: how near-duplicate pages
  usually differ). The 5-gram Jaccard of such a copy is about 0.88.
- ``scattered``: each word is replaced independently with probability 5%. A changed word breaks the five
  5-grams that hold it, so the Jaccard is about 0.95**5 / (2 - 0.95**5) = 0.63, below a 0.8 threshold by
  construction: recall at 0.8 is near zero however good the hashing; the run at ``--dedup-threshold 0.5``
  shows that the method finds them when asked to.

Quality: recall = injected copies removed / injected; precision = removals that are injected copies
(pointing at their source or another copy of it) / all removals; precision on the injected pairs = the
same over the removed injected copies only. Removals of original documents are shown with their true
5-gram Jaccard: Wikipedia has its own near duplicates (one-sentence date stubs, "April 13 is the day of
the year in the Gregorian calendar.", J = 0.78 to one another).
Removals come from the stage's own functions over the same documents (the pipeline lists only a sample of
ids); the pipeline's counters must agree with them.

Cost: ``bertprep pretraining`` with ``--dedup none`` and ``--dedup minhash`` (defaults otherwise, dupe
factor 10), the best wall time of interleaved runs each, on the ``spans`` corpus (the duplicates removed
also save work downstream, so the difference understates the stage's cost) and on the original articles
alone (nothing much removed: the difference is the stage's cost); the dedup fraction is (with - without) /
with. Also the stage's own work on one core (its functions over the same batches, Beam excluded).
Also the signing kernel alone on one core (NumPy), beside datasketch's ``MinHash.bulk`` when installed.

    python benchmarks/dedup_quality.py                 # everything (~5 min on 2 busy cores)
    python benchmarks/dedup_quality.py --skip-pipeline # quality and kernel speed only
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertstream.pipelines.inputs.read import Document, batch_documents, read_documents  # noqa: E402
from bertstream.pipelines.pretraining import dedup as D  # noqa: E402
from bertstream.pipelines.pretraining import minhash as M  # noqa: E402
from bertstream.pipelines.pretraining.kernels import switch  # noqa: E402

WIKI = REPO.parent / "shared" / "data" / "pretrain" / "wikipedia"


def load(files: list[Path]) -> list[Document]:
    docs = []
    for f in files:
        docs += read_documents(str(f), "wikiextractor", Counter(), name=f.name)
    return docs


def edit_words(ws: list[str], rng: random.Random, fraction: float, mode: str) -> list[str]:
    ws = list(ws)
    if mode == "scattered":
        for i in range(len(ws)):
            if rng.random() < fraction:
                ws[i] = f"w{rng.randrange(10**7)}"
        return ws
    span = 10
    for start in rng.sample(range(max(1, len(ws) - span)), max(1, round(len(ws) * fraction / span))):
        for i in range(start, min(len(ws), start + span)):
            ws[i] = f"w{rng.randrange(10**7)}"
    return ws


def inject(docs: list[Document], out: Path, mode: str, seed: int) -> dict[str, str]:
    """Write ``out/wiki_99`` with the injected copies (wikiextractor format); returns copy id -> source id."""
    rng = random.Random(seed)
    eligible = [d for d in docs if sum(len(p.split()) for p in d.paragraphs) >= 50]
    picked = rng.sample(eligible, round(0.15 * len(docs)))
    near, exact = picked[: round(0.10 * len(docs))], picked[round(0.10 * len(docs)) :]
    truth: dict[str, str] = {}
    chunks: list[bytes] = []
    at = 0
    for k, (src, kind) in enumerate([(d, "near") for d in near] + [(d, "exact") for d in exact]):
        if kind == "near":  # edits over the whole document, then cut back into its paragraphs
            split = [p.split() for p in src.paragraphs]
            ws = edit_words([w for p in split for w in p], rng, 0.05, mode)
            cuts = np.cumsum([0] + [len(p) for p in split])
            paras = [" ".join(ws[i:j]) for i, j in zip(cuts[:-1], cuts[1:])]
        else:
            paras = ["  ".join(p.upper().split()) for p in src.paragraphs]
        head = f'<doc id="{900000 + k}" url="injected" title="copy {k}">\n'.encode()
        body = ("copy\n" + "\n".join(paras) + "\n</doc>\n").encode("utf-8")
        truth[f"wiki_99:{at}"] = src.doc_id
        chunks.append(head + body)
        at += len(head) + len(body)
    (out / "wiki_99").write_bytes(b"".join(chunks))
    return truth


def removals_of(docs: list[Document], threshold: float, seed: int) -> dict[str, tuple[str, str]]:
    """What the stage removes (its own functions; one partition: the result does not depend on the count)."""
    parts = D.sign_batch(docs, "minhash", 5, threshold, seed, 1)
    return dict(D.resolve_partition([x for p in parts.values() for x in D.decode_parts(p)], threshold))


def quality(docs: list[Document], truth: dict[str, str], removed: dict[str, tuple[str, str]]) -> dict:
    family: dict[str, set[str]] = {}
    for copy, src in truth.items():
        family.setdefault(src, {src}).add(copy)
    tp = sum(1 for d, (of, _) in removed.items() if d in truth and of in family[truth[d]])
    injected_removed = sum(1 for d in removed if d in truth)
    recall = sum(1 for c in truth if c in removed) / len(truth)
    text = {d.doc_id: D.document_text(d) for d in docs}
    natural = []
    for d, (of, kind) in removed.items():
        if d not in truth:
            a, b = set(M.text_shingles(text[d], 5).tolist()), set(M.text_shingles(text[of], 5).tolist())
            natural.append((d, of, kind, round(len(a & b) / max(1, len(a | b)), 3)))
    return {
        "injected": len(truth),
        "removed": len(removed),
        "recall": round(recall, 4),
        "precision": round(tp / max(1, len(removed)), 4),
        # Of the injected copies removed, those that point at their own source (or another copy of it).
        "precision_injected_pairs": round(tp / max(1, injected_removed), 4),
        "originals_removed": len(natural),
        "originals_removed_true_jaccard": sorted({j for *_, j in natural}),
        "originals_removed_first": natural[:3],
    }


def sign_speed(docs: list[Document], seed: int) -> dict:
    """MB/s on one core: the stage's signing of a batch (kernel, band keys, encoding), the hashes alone by
    the kernel and by the reference, and datasketch's ``MinHash.bulk`` over the same 5-gram shingles."""
    texts = [D.document_text(d) for d in docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    a, b = M.permutations(seed)
    M._compiled_hashes(texts[:2], 5, a, b, True)  # compiled (or loaded from numba's cache) before timing
    out: dict = {"MB": round(mb, 1)}
    for name, fn in (
        ("kernel", lambda: M._compiled_hashes(texts, 5, a, b, True)),
        ("reference", lambda: M.reference_document_hashes(texts, 5, a, b, True)),
    ):
        t = time.perf_counter()
        fn()
        out[f"{name}_MB_per_s"] = round(mb / (time.perf_counter() - t), 2)
    try:
        from datasketch import MinHash
    except ImportError:
        out["datasketch"] = "not installed"
        return out
    t = time.perf_counter()
    sets = []
    for text in texts:
        ws = M.words(text)
        sets.append([" ".join(ws[i : i + 5]).encode() for i in range(max(1, len(ws) - 4))])
    MinHash.bulk(sets, num_perm=M.NUM_PERM, seed=seed)
    out["datasketch_MB_per_s"] = round(mb / (time.perf_counter() - t), 2)
    return out


def stage_seconds(docs: list[Document], seed: int) -> float:
    """One core's time for what the Dedup stage does to these documents: batches as the reader makes them,
    signed (kernel) and spilled as JSON, read back, resolved and filtered (Beam's own overhead excluded)."""
    os.environ[switch.ENV] = "always"
    batches = list(batch_documents(docs, Counter()))
    partitions = D.dedup_partitions(sum(len(D.document_text(d)) for d in docs))
    D.sign_batch(batches[0].documents[:2], "minhash", 5, 0.8, seed, partitions)  # compiled before timing
    t = time.perf_counter()
    sections: dict[int, list[bytes]] = {}
    spilled = []
    for b in batches:
        for p, data in D.sign_batch(b.documents, "minhash", 5, 0.8, seed, partitions).items():
            sections.setdefault(p, []).append(data)
        spilled.append(D.encode_batch(b))
    removed = {}
    for p in sorted(sections):
        removed.update(D.resolve_partition([x for data in sections[p] for x in D.decode_parts(data)], 0.8))
    for data in spilled:
        D.filter_batch(D.decode_batch(data), removed)
    return time.perf_counter() - t


def pipeline(inputs: Path, vocab: str, out: Path, dedup: str, dupe: int) -> tuple[float, dict]:
    cmd = [sys.executable, "-c", "from bertstream.pipelines.cli import main; main()", "pretraining"]
    cmd += ["--input", str(inputs / "wiki_*"), "--format", "wikiextractor", "--vocab", vocab, "--output", str(out)]
    cmd += ["--dedup", dedup, "--dupe-factor", str(dupe)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return seconds, json.loads((out / "manifest.json").read_text())["counters"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--skip-pipeline", action="store_true")
    ap.add_argument("--repeats", type=int, default=2, help="pipeline runs per mode (the fastest counts)")
    ap.add_argument("--dupe", type=int, default=10, help="the pipeline's dupe factor")
    ap.add_argument("--vocab", help="vocab.txt; default: train one on four of the shared files (not timed)")
    args = ap.parse_args()
    files = sorted(WIKI.glob("wiki_*"))
    if not files:
        raise SystemExit(f"Error: no shared Wikipedia text under {WIKI}")
    docs = load(files)
    print(f"{len(docs)} documents, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB")
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {}
        for mode in ("spans", "scattered"):
            d = Path(tmp) / mode
            d.mkdir()
            for f in files:
                os.symlink(f, d / f.name)
            truth = inject(docs, d, mode, args.seed)
            all_docs = docs + load([d / "wiki_99"])
            corpora[mode] = (d, truth, all_docs)
            for threshold in (0.8, 0.5) if mode == "scattered" else (0.8,):
                q = quality(all_docs, truth, removals_of(all_docs, threshold, args.seed))
                print(f"{mode} edits, threshold {threshold}: {json.dumps(q)}")
        print("signing, one core:", json.dumps(sign_speed(docs, args.seed)))
        if args.skip_pipeline:
            return
        d, truth, all_docs = corpora["spans"]
        vocab = args.vocab
        if vocab is None:
            from bertstream.pipelines.vocab import VocabConfig, train_vocab

            train_vocab([str(WIKI / "wiki_0[0-3]")], Path(tmp) / "vocab", VocabConfig(input_format="wikiextractor"))
            vocab = str(Path(tmp) / "vocab" / "vocab.txt")
        clean = Path(tmp) / "clean"  # the original articles only: dedup finds 10 and saves nothing downstream
        clean.mkdir()
        for f in files:
            os.symlink(f, clean / f.name)
        for name, folder in (("spans", d), ("clean", clean)):
            # Interleaved pairs, the faster of each: on a shared machine one run can be slowed by others' work.
            times: dict[str, list[float]] = {"none": [], "minhash": []}
            for k in range(args.repeats):
                for mode in ("none", "minhash"):
                    seconds, counters = pipeline(folder, vocab, Path(tmp) / f"{name}-{mode}{k}", mode, args.dupe)
                    times[mode].append(round(seconds, 1))
            without, with_ = min(times["none"]), min(times["minhash"])
            docs_in = all_docs if name == "spans" else docs
            expected = Counter(kind for _, kind in removals_of(docs_in, 0.8, args.seed).values())
            got = {k: counters.get(f"documents_dropped.{k}_duplicate", 0) for k in ("exact", "near")}
            assert got == {k: expected.get(k, 0) for k in got}, f"pipeline {got} != the stage's functions {expected}"
            print(
                f"pipeline ({name} corpus, dupe {args.dupe}, best of {args.repeats}): none {without:.1f} s, "
                f"minhash {with_:.1f} s {times}; (with - without) / with = {(with_ - without) / with_:.3f}; "
                f"removed {got}"
            )
            if name == "spans":
                stage = stage_seconds(all_docs, args.seed)
                print(
                    f"the stage's own work on one core: {stage:.2f} s = {stage / with_:.3f} of the minhash run's "
                    f"wall time ({len(all_docs)} documents)"
                )


if __name__ == "__main__":
    main()
