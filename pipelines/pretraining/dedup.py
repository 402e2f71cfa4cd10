"""Stage 1b, Dedup: drop exact and near duplicate documents before they are segmented and tokenized.

Modes (``--dedup``): ``none`` (the stage is not in the graph), ``exact`` (documents whose normalised text --
case, whitespace and punctuation folded -- equals another's) and ``minhash`` (exact, then near duplicates
by MinHash over word n-grams). In every group of duplicates the document with the smallest id is kept
(ids compare as ``(name, byte offset)``, see :func:`id_order`); each drop is counted under
``documents_dropped.exact_duplicate`` or ``documents_dropped.near_duplicate``.

MinHash: a document's words (runs of letters and digits after ``casefold``) make its set of ``ngram``-word
shingles, each a 64-bit hash; ``NUM_PERM`` hash functions ``a*x + b mod 2**64`` (``a``, ``b`` derived from
the run's seed) give the signature, the minimum of each over the shingles. The signature is cut into
``bands`` bands of ``rows`` rows (:func:`lsh_params`, derived from the threshold); two documents are
candidates when one band is equal. Candidates are verified on an 8-bit sketch of their signatures (b-bit
minwise hashing, Li & Koenig 2010): the estimated Jaccard must reach the threshold. The hashing runs in a
numba kernel (``pipelines.pretraining.kernels.minhash``, 13-25 MB/s per core), pinned to the readable reference here
(:func:`reference_document_hashes`: the regex, a Python loop per character, NumPy per document, ~1.2 MB/s);
datasketch's ``MinHash.bulk`` measured ~1.3 MB/s on the same text (``benchmarks/dedup_quality.py``).

The text never goes through a shuffle. ``Sign`` turns each batch into small entries -- (band, key, the
document's position in a local id table) plus the id table and the sketches -- and spills them, one section
per partition of the key space, to files in the run's work directory (:mod:`pipelines.common.spill`); only the
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
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from pipelines.common import counters as C
from pipelines.common.hashing import GOLDEN, MASK64, hash64, mix64, mix64_array
from pipelines.common.spill import ByteRange, SpillFn, read_ranges, spill_path, write_file
from pipelines.pretraining.config import MAX_DEDUP_NGRAM
from pipelines.pretraining.dedup_encoding import Part, decode_batch, decode_parts, encode_batch, encode_part
from pipelines.pretraining.read import Document, DocumentBatch

NUM_PERM = 128
EXACT_BAND = -1  # the "band" of exact-hash entries
EXACT = "exact"
NEAR = "near"
REASONS = {EXACT: C.EXACT_DUPLICATE, NEAR: C.NEAR_DUPLICATE}
SAMPLE_SIZE = 100  # removed ids listed in the manifest (the smallest ones)
SHINGLE_BLOCK = 1024  # shingles hashed at a time (1 MB of values: in cache; a book's 200k at once: 200 MB)
# Weights of the false-positive and false-negative areas under the LSH S-curve: every candidate is verified
# on its sketch, so a false positive costs one comparison and a false negative a missed duplicate.
FP_WEIGHT, FN_WEIGHT = 0.1, 0.9
SMALL_SHINGLES = 16  # a document with fewer shingles sends them (up to 128 bytes: a sketch's size)
BYTES_PER_PARTITION = 256 << 20  # input text per partition of the dedup shuffle

_WORD = re.compile(r"[^\W_]+")  # letters and digits (str.isalnum): "_" is punctuation too
WORD_K = hash64("word-hash") | 1  # the polynomial word hash's base (odd)
# Odd multipliers of a shingle's word positions (position 0: 1).
POSITION = np.asarray([1] + [hash64("shingle-position", k) | 1 for k in range(1, MAX_DEDUP_NGRAM)], dtype=np.uint64)

# (removed id, (kept id it duplicates, kind))
Removal = tuple[str, tuple[str, str]]


# --- pure functions -------------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """The words of a text, case folded: runs of letters and digits; anything else separates them."""
    return _WORD.findall(text.casefold())


def normalise(text: str) -> str:
    """Case, whitespace and punctuation folded: ``"Hello,  World!"`` -> ``"hello world"``."""
    return " ".join(words(text))


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


def word_hashes(ws: Sequence[str]) -> np.ndarray:
    """uint64 [W]: ``mix64(sum(ord(c) * WORD_K**i))`` over each word's characters (mod 2**64): a polynomial
    hash, which the kernel computes over code points with the same wrapping arithmetic."""
    out = []
    for w in ws:
        h, p = 0, 1
        for c in w:
            h = (h + ord(c) * p) & MASK64
            p = (p * WORD_K) & MASK64
        out.append(h)
    return mix64_array(np.asarray(out, dtype=np.uint64))


def exact_fold(wh: np.ndarray) -> int:
    """A text's exact hash from its word hashes: ``mix64`` of the sum of ``mix64(h ^ position * GOLDEN)``
    and the word count (order matters)."""
    with np.errstate(over="ignore"):
        pos = np.arange(len(wh), dtype=np.uint64) * np.uint64(GOLDEN)
        total = int(mix64_array(wh ^ pos).sum(dtype=np.uint64)) if len(wh) else 0
    return mix64((total + len(wh)) & MASK64)


def text_shingles(text: str, ngram: int) -> np.ndarray:
    """uint64 [S]: :func:`shingles` of a text's words."""
    return shingles(word_hashes(words(text)), ngram)


def shingles(wh: np.ndarray, ngram: int) -> np.ndarray:
    """uint64 [S]: the hashes of the ``ngram``-word shingles of a text's word hashes, in text order, repeats
    included (a minimum does not care); a shorter text is one shingle, a text without words none. A shingle
    is ``mix64`` of its word hashes times a distinct odd constant per position, summed (order matters)."""
    if not len(wh):
        return np.zeros(0, np.uint64)
    n = min(ngram, len(wh))
    m = len(wh) - n + 1
    acc = wh[:m].copy()
    with np.errstate(over="ignore"):
        for k in range(1, n):
            acc += wh[k : k + m] * POSITION[k]
    return mix64_array(acc)


@lru_cache(maxsize=8)
def permutations(seed: int, num_perm: int = NUM_PERM) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): uint64 [num_perm] each, ``a`` odd; derived from the seed only."""
    a = np.asarray([hash64("minhash-a", seed, i) | 1 for i in range(num_perm)], dtype=np.uint64)
    b = np.asarray([hash64("minhash-b", seed, i) for i in range(num_perm)], dtype=np.uint64)
    return a, b


def signature(sh: np.ndarray, a: np.ndarray, b: np.ndarray, block: int = SHINGLE_BLOCK) -> np.ndarray:
    """uint64 [P]: ``min over shingles x of (a[p] * x + b[p]) mod 2**64`` (all ones without shingles)."""
    sig = np.full(len(a), np.iinfo(np.uint64).max, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for s in range(0, len(sh), block):
            vals = sh[s : s + block, None] * a[None, :] + b[None, :]  # [block, P]
            np.minimum(sig, vals.min(axis=0), out=sig)
    return sig


@lru_cache(maxsize=64)
def lsh_params(threshold: float, num_perm: int = NUM_PERM) -> tuple[int, int]:
    """(bands, rows), ``bands * rows <= num_perm``, minimising ``FP_WEIGHT`` x the area under the S-curve
    ``1 - (1 - s**rows)**bands`` below the threshold plus ``FN_WEIGHT`` x the area above it missed (the
    criterion of datasketch's ``MinHashLSH``, with weights that favour recall: candidates are verified)."""
    s = np.linspace(0.0, 1.0, 2001)
    below, above = s <= threshold, s >= threshold
    best: tuple[float, int, int] | None = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            p = 1.0 - (1.0 - s**rows) ** bands
            fp = np.trapezoid(p[below], s[below])
            fn = np.trapezoid(1.0 - p[above], s[above])
            err = FP_WEIGHT * fp + FN_WEIGHT * fn
            if best is None or err < best[0] - 1e-12:
                best = (float(err), bands, rows)
    assert best is not None
    return best[1], best[2]


def band_keys(sigs: np.ndarray, bands: int, rows: int, seed: int) -> np.ndarray:
    """uint64 [D, bands]: a hash of each band of each signature (``sigs``: uint64 [D, P]); the band index is
    folded in, so equal rows in different bands give different keys."""
    out = np.empty((len(sigs), bands), dtype=np.uint64)
    for j in range(bands):
        acc = np.full(len(sigs), hash64("band", seed, j), dtype=np.uint64)
        for r in range(j * rows, (j + 1) * rows):
            acc = mix64_array(acc ^ sigs[:, r])
        out[:, j] = acc
    return out


def sketches(sigs: np.ndarray) -> np.ndarray:
    """uint8 [D, P]: 8 bits of each signature value after mixing (equal values give equal bits; different
    values agree by chance 1/256 of the time, which :func:`estimated_jaccard` corrects)."""
    return (mix64_array(sigs) & np.uint64(0xFF)).astype(np.uint8)


def estimated_jaccard(one: np.ndarray, others: np.ndarray) -> np.ndarray:
    """float [K]: Jaccard estimated from 8-bit sketches, ``one``: uint8 [P], ``others``: uint8 [K, P]."""
    agree = (others == one[None, :]).mean(axis=1)
    return np.clip((agree - 1 / 256) / (1 - 1 / 256), 0.0, 1.0)


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


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard of two sets of distinct hashes."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def reference_document_hashes(
    texts: Sequence[str], ngram: int, a: np.ndarray, b: np.ndarray, minhash: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word counts int64 [D], exact hashes uint64 [D], signatures uint64 [D, P] or [D, 0]) of texts: the
    readable definition that ``pipelines.pretraining.kernels.minhash.document_hashes`` is pinned to."""
    counts, exact, sigs = [], [], []
    for t in texts:
        wh = word_hashes(words(t))
        counts.append(len(wh))
        exact.append(exact_fold(wh))
        if minhash:
            sigs.append(signature(shingles(wh, ngram), a, b))
    sig = np.stack(sigs) if sigs else np.zeros((len(texts), 0), np.uint64)
    return np.asarray(counts, np.int64), np.asarray(exact, np.uint64), sig


def document_hashes(
    texts: Sequence[str], ngram: int, a: np.ndarray, b: np.ndarray, minhash: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`reference_document_hashes`, compiled (~10x faster), once the process has done some work."""
    from pipelines.pretraining.kernels import switch

    return switch.run(_compiled_hashes, reference_document_hashes, texts, ngram, a, b, minhash)


def _compiled_hashes(texts: Sequence[str], ngram: int, a: np.ndarray, b: np.ndarray, minhash: bool):
    from pipelines.pretraining.kernels import minhash as kernel  # numba's import only in processes that sign
    from pipelines.pretraining.kernels import readonly

    folded = [t.casefold() for t in texts]
    # Code points, documents separated by a newline (not a word character); offsets in code points.
    cps = np.frombuffer("\n".join(folded).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    starts = np.cumsum([0] + [len(f) + 1 for f in folded], dtype=np.int64)
    return kernel.document_hashes(
        readonly(cps, np.uint32),
        readonly(starts),
        readonly(kernel.word_table()),
        np.uint64(WORD_K),
        readonly(POSITION),
        int(ngram),
        readonly(a, np.uint64),
        readonly(b, np.uint64),
        bool(minhash),
    )


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


class _SignFn(SpillFn):
    """Batches -> entries, spilled; yields (partition, (path, byte range)) references, and on ``DOCS`` the
    path of each batch, spilled whole: the batches wait on disk, not in the runner, until the side input of
    removed ids is complete (a runner holds a PCollection that crosses such a stage boundary in memory)."""

    DOCS = "docs"

    def __init__(self, mode: str, ngram: int, threshold: float, seed: int, partitions: int, work_dir: str) -> None:
        super().__init__(work_dir)
        self.args = (mode, ngram, threshold, seed, partitions)

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

    def __init__(
        self,
        mode: str,
        *,
        ngram: int = 5,
        threshold: float = 0.8,
        seed: int = 0,
        work_dir: str,
        partitions: int = 8,
        sample_size: int = SAMPLE_SIZE,
    ) -> None:
        super().__init__()
        if mode not in ("exact", "minhash"):
            raise ValueError(f"dedup mode must be 'exact' or 'minhash', got {mode!r}")
        self.mode, self.ngram, self.threshold, self.seed = mode, ngram, threshold, seed
        self.work_dir, self.partitions, self.sample_size = work_dir, partitions, sample_size

    def expand(self, batches):
        fn = _SignFn(self.mode, self.ngram, self.threshold, self.seed, self.partitions, self.work_dir)
        signed = batches | "Sign" >> beam.ParDo(fn).with_outputs(fn.DOCS, main="entries")
        removals = (
            signed.entries
            | "GroupPartitions" >> beam.GroupByKey()
            | "Resolve" >> beam.FlatMap(_resolve, self.threshold)
            | "MergePerDocument" >> beam.CombinePerKey(merge_removals)
        )
        kept = signed[fn.DOCS] | "Filter" >> beam.Map(_filter, removed=beam.pvalue.AsDict(removals))
        params: dict[str, Any] = {"mode": self.mode}
        if self.mode == "minhash":
            bands, rows = lsh_params(self.threshold)
            params |= {"ngram": self.ngram, "threshold": self.threshold, "num_perm": NUM_PERM}
            params |= {"bands": bands, "rows": rows}
        n = self.sample_size
        stats = (
            removals
            | "SmallestRemoved" >> beam.combiners.Top.Of(n, key=lambda r: id_order(r[0]), reverse=True)
            | "Describe" >> beam.Map(lambda rs: {"duplicates": {**params, "removed_sample": removal_sample(rs, n)}})
        )
        return kept, stats
