"""MinHash maths of the dedup stage (:mod:`bertstream.pipelines.pretraining.dedup` runs it in Beam): words, word hashes,
``ngram``-word shingles, signatures under ``NUM_PERM`` hash functions ``a*x + b mod 2**64``, the LSH band
parameters for a threshold, band keys, 8-bit sketches and the Jaccard estimates, and the per-document hashes
(:func:`reference_document_hashes`, the readable definition the numba kernel
``bertstream.pipelines.pretraining.kernels.minhash`` is pinned to, and :func:`document_hashes`, which runs the kernel)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from bertstream.pipelines.pretraining.config import MAX_DEDUP_NGRAM
from bertstream.schemas.hashing import GOLDEN, MASK64, hash64, mix64, mix64_array

NUM_PERM = 128
SHINGLE_BLOCK = 1024  # shingles hashed at a time (1 MB of values: in cache; a book's 200k at once: 200 MB)
# Weights of the false-positive and false-negative areas under the LSH S-curve: every candidate is verified
# on its sketch, so a false positive costs one comparison and a false negative a missed duplicate.
FP_WEIGHT, FN_WEIGHT = 0.1, 0.9

_WORD = re.compile(r"[^\W_]+")  # letters and digits (str.isalnum): "_" is punctuation too
WORD_K = hash64("word-hash") | 1  # the polynomial word hash's base (odd)
# Odd multipliers of a shingle's word positions (position 0: 1).
POSITION = np.asarray([1] + [hash64("shingle-position", k) | 1 for k in range(1, MAX_DEDUP_NGRAM)], dtype=np.uint64)


def words(text: str) -> list[str]:
    """The words of a text, case folded: runs of letters and digits; anything else separates them."""
    return _WORD.findall(text.casefold())


def normalise(text: str) -> str:
    """Case, whitespace and punctuation folded: ``"Hello,  World!"`` -> ``"hello world"``."""
    return " ".join(words(text))


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


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard of two sets of distinct hashes."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def reference_document_hashes(
    texts: Sequence[str], ngram: int, a: np.ndarray, b: np.ndarray, minhash: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word counts int64 [D], exact hashes uint64 [D], signatures uint64 [D, P] or [D, 0]) of texts: the
    readable definition that ``bertstream.pipelines.pretraining.kernels.minhash.document_hashes`` is pinned to."""
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
    from bertstream.pipelines.pretraining.kernels import switch

    return switch.run(_compiled_hashes, reference_document_hashes, texts, ngram, a, b, minhash)


def _compiled_hashes(texts: Sequence[str], ngram: int, a: np.ndarray, b: np.ndarray, minhash: bool):
    from bertstream.pipelines.pretraining.kernels import minhash as kernel  # numba's import only in processes that sign
    from bertstream.pipelines.pretraining.kernels import readonly

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
