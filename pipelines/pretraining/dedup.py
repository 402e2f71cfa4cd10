"""Stage 1b, Dedup: drop exact and near duplicate documents before they are segmented and tokenized.

Modes (``--dedup``): ``none`` (the stage is not in the graph), ``exact`` (documents whose normalised text --
case, whitespace and punctuation folded -- equals another's) and ``minhash`` (exact, then near duplicates
by MinHash over word n-grams). In every group of duplicates the document with the smallest id is kept
(ids compare as ``(name, byte offset)``, see :func:`id_order`); each drop is counted under
``documents_dropped.exact_duplicate`` or ``documents_dropped.near_duplicate``.

MinHash: a document's words (runs of letters and digits after ``casefold``) make its set of ``ngram``-word
shingles, each a 64-bit hash; ``NUM_PERM`` hash functions ``a*x + b mod 2**64`` (``a``, ``b`` derived from
the run's seed) give the signature, the minimum of each over the shingles. The signature is cut into
``bands`` bands of ``rows`` rows (``lsh_params``, derived from the threshold); two documents are
candidates when one band is equal. Candidates are verified on an 8-bit sketch of their signatures (b-bit
minwise hashing, Li & Koenig 2010): the estimated Jaccard must reach the threshold. The hashing runs in a
numba kernel (``bertstream.pipelines.pretraining.kernels.minhash``, 13-25 MB/s per core), pinned to the readable
reference (``bertstream.pipelines.pretraining.minhash.reference_document_hashes``, with the rest of the maths: the regex, a Python loop per character, NumPy per document, ~1.2 MB/s);
datasketch's ``MinHash.bulk`` measured ~1.3 MB/s on the same text (``benchmarks/dedup_quality.py``).

The text never goes through a shuffle. ``Sign`` turns each batch into small entries -- (band, key, the
document's position in a local id table) plus the id table and the sketches -- and spills them, one section
per partition of the key space, to files in the run's work directory (:mod:`bertstream.pipelines.common.spill`); only the
references are grouped, and the batches themselves wait in spill files too. ``Resolve`` reads one
partition's sections and finds the duplicates in it; the ``(removed id, kept id, kind)`` records (few: one
per duplicate) are merged per document and reach ``Filter`` as a side input (held by each worker: ~100
bytes per removed document), which drops the documents from their batches. The entries take ~2.5 KB per
document on disk (1 + bands entries, and each partition's copy of the document's id and sketch); a
``Resolve`` worker holds one partition's share, ``1 / partitions`` of them, whatever the corpus size.

Resolution (deterministic for any worker count and any partition count, since a bucket -- the documents
that share one band key, or one exact hash -- lies inside one partition): members of a bucket are taken in
id order; a member whose estimated Jaccard with an earlier *representative* of the bucket reaches the
threshold duplicates the first such representative; otherwise it becomes a representative. Comparing with
representatives only keeps a bucket of ``k`` copies at ``k`` comparisons instead of ``k**2``. A document
dropped in any bucket is dropped (exact wins over near; the smallest kept id is recorded), so the kept id a
document duplicates may itself be a near duplicate of a smaller one (a chain), never a larger one.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.spill import ByteRange, SpillFn, read_ranges, spill_path, write_file
from bertstream.pipelines.inputs.documents import Document, DocumentBatch
from bertstream.pipelines.pretraining.dedup_encoding import Part, decode_batch, decode_parts, encode_batch, encode_part
from bertstream.pipelines.pretraining.minhash import (
    NUM_PERM,
    band_keys,
    document_hashes,
    estimated_jaccard,
    exact_fold,
    exact_jaccard,
    lsh_params,
    permutations,
    sketches,
    text_shingles,
    word_hashes,
    words,
)

EXACT_BAND = -1  # the "band" of exact-hash entries
EXACT = "exact"
NEAR = "near"
REASONS = {EXACT: C.EXACT_DUPLICATE, NEAR: C.NEAR_DUPLICATE}
SAMPLE_SIZE = 100  # removed ids listed in the manifest (the smallest ones)
SMALL_SHINGLES = 16  # a document with fewer shingles sends them (up to 128 bytes: a sketch's size)
BYTES_PER_PARTITION = 256 << 20  # input text per partition of the dedup shuffle


# (removed id, (kept id it duplicates, kind))
Removal = tuple[str, tuple[str, str]]


# --- pure functions -------------------------------------------------------------------------------------


def document_text(doc: Document) -> str:
    return "\n".join(doc.paragraphs)


def exact_hash(text: str) -> int:
    """64-bit hash of the normalised text (its words in order): equal for exact duplicates."""
    return exact_fold(word_hashes(words(text)))


def id_order(doc_id: str) -> tuple[str, int]:
    """How ids compare: ``(name, byte offset)``, so ``wiki_00:999`` comes before ``wiki_00:1000``."""
    name, sep, offset = doc_id.rpartition(":")
    if sep and offset.isdigit():
        return name, int(offset)
    return doc_id, -1


def dedup_partitions(input_bytes: int) -> int:
    """Partitions of the dedup shuffle: about ``BYTES_PER_PARTITION`` of input each, 8 to 4096."""
    return int(min(4096, max(8, math.ceil(input_bytes / BYTES_PER_PARTITION))))


def partition_of(keys: np.ndarray, partitions: int) -> np.ndarray:
    """int64 [N]: a key's partition, from its high 32 bits (keys are uniform hashes)."""
    return ((keys >> np.uint64(32)) * np.uint64(partitions) >> np.uint64(32)).astype(np.int64)


def similarity(sk: np.ndarray, small: list[np.ndarray | None], m: int, others: list[int]) -> np.ndarray:
    """float [K]: document ``m``'s Jaccard with each of ``others``: exact when both are small documents
    (their few shingles are at hand), else estimated from the sketches (:func:`estimated_jaccard`)."""
    est = estimated_jaccard(sk[m], sk[others])
    mine = small[m]
    if mine is not None:
        for j, o in enumerate(others):
            theirs = small[o]
            if theirs is not None:
                est[j] = exact_jaccard(mine, theirs)
    return est


def sign_batch(
    documents: Sequence[Document], mode: str, ngram: int, threshold: float, seed: int, partitions: int
) -> dict[int, bytes]:
    """A batch's entries, one encoded part per partition they fall in. Documents without words take no part
    (they are dropped later as empty, counted)."""
    a, b = permutations(seed)
    counts, exact, sigs = document_hashes([document_text(d) for d in documents], ngram, a, b, mode == "minhash")
    has_words = np.flatnonzero(counts > 0)
    if not len(has_words):
        return {}
    ids = [documents[i].doc_id for i in has_words.tolist()]
    n = len(ids)
    keys = [exact[has_words]]
    bands = [np.full(n, EXACT_BAND, dtype=np.int32)]
    docs = [np.arange(n, dtype=np.uint32)]
    sk = np.zeros((n, 0), np.uint8)
    small: list[np.ndarray | None] = [None] * n
    if mode == "minhash":
        # A text of a few words has a few shingles: 128 hashes estimate its Jaccard poorly (one-sentence
        # stubs from one template sit at 0.78 and scatter over 0.8), so its shingles travel instead.
        for j, i in enumerate(has_words.tolist()):
            if counts[i] < ngram + SMALL_SHINGLES:
                small[j] = np.unique(text_shingles(document_text(documents[i]), ngram))
        matrix = sigs[has_words]  # [D, P]
        nb, rows = lsh_params(threshold)
        bk = band_keys(matrix, nb, rows, seed)  # [D, bands]
        keys.append(bk.ravel())
        bands.append(np.tile(np.arange(nb, dtype=np.int32), n))
        docs.append(np.repeat(np.arange(n, dtype=np.uint32), nb))
        sk = sketches(matrix)
    key = np.concatenate(keys)
    band = np.concatenate(bands)
    doc = np.concatenate(docs)
    part = partition_of(key, partitions)
    out = {}
    for p in np.unique(part).tolist():
        sel = part == p
        local = np.unique(doc[sel])  # the part's own id table: only the documents it refers to
        remap = np.searchsorted(local, doc[sel]).astype(np.uint32)
        at = local.tolist()
        out[p] = encode_part(Part(band[sel], key[sel], remap, [ids[i] for i in at], sk[local], [small[i] for i in at]))
    return out


def resolve_partition(parts: Iterable[Part], threshold: float) -> list[Removal]:
    """The duplicates among one partition's entries (see the module docstring for the rule)."""
    bands_l: list = []
    keys_l: list = []
    docs_l: list = []
    ids: list = []
    sk_l: list = []
    small: list[np.ndarray | None] = []
    for part in parts:
        bands_l.append(part.bands)
        keys_l.append(part.keys)
        docs_l.append(part.docs.astype(np.int64) + len(ids))
        ids.extend(part.ids)
        sk_l.append(part.sketches)
        small.extend(part.small)
    if not ids:
        return []
    band = np.concatenate(bands_l)
    key = np.concatenate(keys_l)
    doc = np.concatenate(docs_l)
    sk = np.concatenate(sk_l) if sk_l else np.zeros((len(ids), 0), np.uint8)
    order = np.lexsort((key, band))
    band, key, doc = band[order], key[order], doc[order]
    same = (band[1:] == band[:-1]) & (key[1:] == key[:-1])
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.append(starts[1:], len(key))
    removed: dict[str, tuple[str, str]] = {}
    for s, e in zip(starts.tolist(), ends.tolist()):
        if e - s < 2:
            continue
        members = sorted(set(doc[s:e].tolist()), key=lambda i: id_order(ids[i]))
        if band[s] == EXACT_BAND:
            for m in members[1:]:
                _record(removed, ids[m], ids[members[0]], EXACT)
            continue
        reps = [members[0]]
        for m in members[1:]:
            est = similarity(sk, small, m, reps)
            hit = np.flatnonzero(est >= threshold)
            if len(hit):
                _record(removed, ids[m], ids[reps[int(hit[0])]], NEAR)
            else:
                reps.append(m)
    return sorted(removed.items(), key=lambda kv: id_order(kv[0]))


def _better(new: tuple[str, str], old: tuple[str, str]) -> bool:
    """Exact wins over near; then the smaller kept id."""
    return (new[1] != EXACT, id_order(new[0])) < (old[1] != EXACT, id_order(old[0]))


def _record(removed: dict[str, tuple[str, str]], doc: str, of: str, kind: str) -> None:
    if doc not in removed or _better((of, kind), removed[doc]):
        removed[doc] = (of, kind)


def merge_removals(records: Iterable[tuple[str, str]]) -> tuple[str, str]:
    """One document's removal records (from several buckets) -> the one kept (:func:`_better`)."""
    best: tuple[str, str] | None = None
    for r in records:
        if best is None or _better(r, best):
            best = r
    assert best is not None
    return best


def filter_batch(batch: DocumentBatch, removed: dict[str, tuple[str, str]]) -> DocumentBatch:
    """The batch without its removed documents, each counted under its reason."""
    counters = Counter(batch.counters)
    kept = []
    for doc in batch.documents:
        r = removed.get(doc.doc_id)
        if r is None:
            kept.append(doc)
        else:
            counters[C.drop(REASONS[r[1]])] += 1
    return DocumentBatch(kept, counters)


def removal_sample(removals: Iterable[Removal], n: int = SAMPLE_SIZE) -> list[dict[str, str]]:
    """The ``n`` smallest removed ids, each with the id it duplicated and how."""
    smallest = heapq.nsmallest(n, removals, key=lambda r: id_order(r[0]))
    return [{"id": d, "duplicate_of": of, "kind": kind} for d, (of, kind) in smallest]


# --- Beam ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class DedupSpec:
    """The dedup stage: ``exact`` (normalised text) or ``minhash`` (``ngram``-word shingles, estimated Jaccard
    similarity of at least ``threshold``), the signature partitions, the spill folder, and how many removed
    ids the manifest samples."""

    mode: str
    work_dir: str
    ngram: int = 5
    threshold: float = 0.8
    seed: int = 0
    partitions: int = 8
    sample_size: int = SAMPLE_SIZE

    def __post_init__(self) -> None:
        if self.mode not in ("exact", "minhash"):
            raise ValueError(f"dedup mode must be 'exact' or 'minhash', got {self.mode!r}")


class _SignFn(SpillFn):
    """Batches -> entries, spilled; yields (partition, (path, byte range)) references, and on ``DOCS`` the
    path of each batch, spilled whole: the batches wait on disk, not in the runner, until the side input of
    removed ids is complete (a runner holds a PCollection that crosses such a stage boundary in memory)."""

    DOCS = "docs"

    def __init__(self, spec: DedupSpec) -> None:
        super().__init__(spec.work_dir)
        self.args = (spec.mode, spec.ngram, spec.threshold, spec.seed, spec.partitions)

    def size(self, element: dict[int, bytes]) -> int:
        return sum(len(v) for v in element.values())

    def process(self, batch: DocumentBatch) -> Iterator[Any]:
        data = encode_batch(batch)
        path = spill_path(self.work_dir, "dedup-docs", [data])
        write_file(path, [data])
        yield beam.pvalue.TaggedOutput(self.DOCS, path)
        yield from super().process(sign_batch(batch.documents, *self.args))

    def spill(self, elements: list[dict[int, bytes]]) -> Iterator[tuple[int, tuple[str, ByteRange]]]:
        sections: dict[int, list[bytes]] = {}
        for parts in elements:
            for p, data in parts.items():
                sections.setdefault(p, []).append(data)
        elements.clear()
        order = sorted(sections)
        chunks = [b"".join(sections.pop(p)) for p in order]
        path = spill_path(self.work_dir, "dedup", chunks)  # the same entries give the same name on a retry
        write_file(path, chunks)
        at = 0
        for p, c in zip(order, chunks):
            yield p, (path, (at, len(c)))
            at += len(c)


def _filter(path: str, removed: dict[str, tuple[str, str]]) -> DocumentBatch:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return filter_batch(decode_batch(f.read()), removed)


def _resolve(item: tuple[int, Iterable[tuple[str, ByteRange]]], threshold: float) -> list[Removal]:
    _, refs = item
    by_path: dict[str, list[ByteRange]] = {}
    for path, r in refs:
        by_path.setdefault(path, []).append(r)
    parts: list = []
    for path in sorted(by_path):
        for data in read_ranges(path, sorted(by_path[path])):
            parts.extend(decode_parts(data))
    return resolve_partition(parts, threshold)


class Dedup(beam.PTransform):
    """``PCollection[DocumentBatch]`` -> (``PCollection[DocumentBatch]`` without duplicates, a one-element
    ``PCollection`` of ``{"duplicates": {...}}`` for the manifest's statistics)."""

    def __init__(self, spec: DedupSpec) -> None:
        super().__init__()
        self.spec = spec

    def expand(self, batches):
        spec = self.spec
        fn = _SignFn(spec)
        signed = batches | "Sign" >> beam.ParDo(fn).with_outputs(fn.DOCS, main="entries")
        removals = (
            signed.entries
            | "GroupPartitions" >> beam.GroupByKey()
            | "Resolve" >> beam.FlatMap(_resolve, spec.threshold)
            | "MergePerDocument" >> beam.CombinePerKey(merge_removals)
        )
        kept = signed[fn.DOCS] | "Filter" >> beam.Map(_filter, removed=beam.pvalue.AsDict(removals))
        params: dict[str, Any] = {"mode": spec.mode}
        if spec.mode == "minhash":
            bands, rows = lsh_params(spec.threshold)
            params |= {"ngram": spec.ngram, "threshold": spec.threshold, "num_perm": NUM_PERM}
            params |= {"bands": bands, "rows": rows}
        n = spec.sample_size
        stats = (
            removals
            | "SmallestRemoved" >> beam.combiners.Top.Of(n, key=lambda r: id_order(r[0]), reverse=True)
            | "Describe" >> beam.Map(lambda rs: {"duplicates": {**params, "removed_sample": removal_sample(rs, n)}})
        )
        return kept, stats
