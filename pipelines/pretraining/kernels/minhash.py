"""Word hashes, exact hashes and MinHash signatures of a batch of documents, compiled.

The same arithmetic as :func:`bertstream.pipelines.pretraining.minhash.reference_document_hashes` (words by the regex, a Python loop
per character, NumPy per document), which ``tests/pipelines/test_dedup.py`` pins this kernel to. The
reference spends ~0.4 s per MB in the interpreter (the word list and the per-character hash); here one pass
over the code points finds the words and hashes them, and each shingle updates the signature in place.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from bertstream.pipelines.pretraining.kernels.hashing import G, mix64

_U64 = np.uint64
_MAX = np.iinfo(np.uint64).max


@lru_cache(maxsize=1)
def word_table() -> np.ndarray:
    """bool [0x110000]: the code points of words, ``chr(c).isalnum()``: what the reference's regex
    ``[^\\W_]`` matches (tests check every code point)."""
    return np.fromiter((chr(c).isalnum() for c in range(0x110000)), dtype=np.bool_, count=0x110000)


@njit(cache=True)
def document_hashes(cps, starts, table, word_k, position, ngram, a, b, minhash):
    """Documents ``cps[starts[d]:starts[d + 1]]`` (case-folded code points) -> (word counts int64 [D],
    exact hashes uint64 [D], signatures uint64 [D, P], or [D, 0] without ``minhash``)."""
    n_docs = len(starts) - 1
    p = len(a) if minhash else 0
    counts = np.zeros(n_docs, np.int64)
    exact = np.zeros(n_docs, np.uint64)
    sigs = np.full((n_docs, p), _MAX, np.uint64)
    for d in range(n_docs):
        s, e = starts[d], min(starts[d + 1], len(cps))
        wh = np.empty(max(1, (e - s + 1) // 2), np.uint64)  # at most one word per two code points
        nw = 0
        h = _U64(0)
        k = _U64(1)
        inword = False
        for i in range(s, e):
            c = cps[i]
            if table[c]:
                if not inword:
                    h, k, inword = _U64(0), _U64(1), True
                h += _U64(c) * k
                k *= word_k
            elif inword:
                wh[nw] = mix64(h)
                nw += 1
                inword = False
        if inword:
            wh[nw] = mix64(h)
            nw += 1
        counts[d] = nw
        total = _U64(0)
        for j in range(nw):
            total += mix64(wh[j] ^ (_U64(j) * G))
        exact[d] = mix64(total + _U64(nw))
        if not minhash or nw == 0:
            continue
        n = min(ngram, nw)
        sig = sigs[d]
        for t in range(nw - n + 1):
            acc = wh[t]
            for q in range(1, n):
                acc += wh[t + q] * position[q]
            x = mix64(acc)
            for j in range(p):
                v = x * a[j] + b[j]
                if v < sig[j]:
                    sig[j] = v
    return counts, exact, sigs
