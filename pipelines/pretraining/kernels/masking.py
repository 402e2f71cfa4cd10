"""Static masked-LM predictions for a batch, compiled: :func:`bertstream.schemas.masking.mask`'s output.

The rule's NumPy form hashes every position of an ``[N, Lmax]`` grid and partially sorts each row; here
each instance is one pass over its positions with the same hashes, then the same choice:

- the ``k`` candidates with the smallest keys (or, whole-word, words in key order while they fit);
- found by sorting only the keys below a bound that about ``k + 2 sqrt(k) + 2`` uniform keys fall under
  (the bound widened in the ~2% of instances where that keeps too few). The kept keys are a prefix of
  the full key order, so the bound only saves work: the choice is a full sort's.

Candidate keys are distinct within an instance (``x = key*G + pos*C + purpose`` with odd ``C`` is
injective in ``pos`` below 2**64, and SplitMix's finaliser is a bijection), so "the ``k`` smallest" is
one set whatever the selection method.

The rule's constants (the 80/10/10 thresholds, the draws' purposes) come in as arguments, not as globals:
numba freezes globals into its cached code and would not see a change made in ``bertstream.schemas``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from bertstream.pipelines.pretraining.kernels.hashing import G, mix64, uniform

_U64 = np.uint64
_ALL = _U64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True)
def _bound(count, expect):
    """An (inclusive) key bound that about ``expect`` of ``count`` uniform keys fall under; ``_ALL`` keeps all."""
    if expect >= 0.5 * count:
        return _ALL
    return _U64(expect / count * 18446744073709551616.0)


@njit(cache=True)
def _sorted_below(keys, count, bound, sk, si, order):
    """Indices ``c`` of ``keys[:count] <= bound`` in ascending key order into ``order``; returns how many.

    Branch-free compaction, then a counting sort (a key's rank is how many kept keys are smaller): for a
    few dozen random keys this beats any sort with data-dependent branches, which mispredict half the time.
    """
    m = 0
    for c in range(count):
        sk[m] = keys[c]
        si[m] = c
        m += keys[c] <= bound
    for s in range(m):
        key = sk[s]
        r = 0
        for t in range(m):
            r += sk[t] < key
        order[r] = si[s]
    return m


@njit(cache=True)
def _first_expect(k):
    return k + 2.0 * math.sqrt(k) + 2.0  # k is then below the kept count in ~98% of instances


@njit(cache=True)
def _smallest(keys, cand, count, k, chosen, sk, si, order):
    """Marks in ``chosen`` the ``k`` candidate positions ``cand[:count]`` with the smallest ``keys``."""
    expect = _first_expect(k)
    while True:
        bound = _bound(count, expect)
        m = _sorted_below(keys, count, bound, sk, si, order)
        if m >= k or bound == _ALL:
            break
        expect *= 2.0  # too few below the bound: widen it
    for s in range(min(k, m)):
        chosen[cand[order[s]]] = True


@njit(cache=True)
def _take_words(order, m, word_start, word_len, cand, k, chosen):
    """Greedy over words in key order ``order[:m]``: each taken if it still fits in ``k``; returns the count."""
    taken = 0
    for s in range(m):
        if taken >= k:
            break
        w = order[s]
        n = word_len[w]
        if taken + n > k:
            continue
        for c in range(word_start[w], word_start[w] + n):
            chosen[cand[c]] = True
        taken += n
    return taken


@njit(cache=True)
def _whole_words(keys, cand, count, continues, k, chosen, word_start, word_len, word_key, sk, si, order):
    """The reference's whole-word selection: candidates grouped into words (a candidate that continues a
    word, ``continues[p]``, right after the previous candidate joins its word), words in key order of their
    first piece, each taken if it still fits in ``k``, until ``k`` are taken."""
    w = 0
    prev = -2
    for c in range(count):
        p = cand[c]
        if continues[p] and p == prev + 1 and w > 0:
            word_len[w - 1] += 1
        else:
            word_start[w] = c
            word_len[w] = 1
            word_key[w] = keys[c]
            w += 1
        prev = p
    expect = _first_expect(k)
    while True:
        bound = _bound(w, expect)
        m = _sorted_below(word_key, w, bound, sk, si, order)
        # The kept words are a prefix of the full key order: decided once k are taken within it.
        if _take_words(order, m, word_start, word_len, cand, k, chosen) >= k or bound == _ALL:
            break
        for c in range(count):
            chosen[cand[c]] = False
        expect *= 2.0


@njit(cache=True)
def mask(ids, offsets, seg_a, keys, k_rule, mask_id, random_ids, continues, whole_word, thresholds, draws):
    """``(masked ids, positions, labels, pred_offsets)``; ``keys`` is the rule's key per instance, ``k_rule``
    ``num_to_predict``; ``continues`` is ``[len(ids)]`` bool, the token continues the previous token's word
    (whole-word only); from ``bertstream.schemas.masking``, ``thresholds`` is ``[MASK_FRACTION, KEEP_OF_REST]``
    float64 and ``draws`` ``[POSITION_STEP, PICK, MASK80, KEEP50, RANDOM]`` uint64."""
    step, pick, mask80, keep50, replace = draws[0], draws[1], draws[2], draws[3], draws[4]
    mask_fraction, keep_of_rest = thresholds[0], thresholds[1]
    n = len(offsets) - 1
    out = ids.copy()
    bound = 0
    lmax = 0
    for i in range(n):
        length = offsets[i + 1] - offsets[i]
        bound += max(0, min(k_rule[i], length - 3))
        lmax = max(lmax, length)
    positions = np.empty(bound + 1, dtype=np.uint16)  # + 1: the compaction writes one past the last
    labels = np.empty(bound, dtype=ids.dtype)
    pred_offsets = np.zeros(n + 1, dtype=np.int64)
    # Per-instance scratch, allocated once.
    order_keys = np.empty(lmax, dtype=np.uint64)
    cand = np.empty(lmax, dtype=np.int64)
    chosen = np.zeros(lmax, dtype=np.bool_)
    sk = np.empty(lmax, dtype=np.uint64)
    si = np.empty(lmax, dtype=np.int64)
    order = np.empty(lmax, dtype=np.int64)
    word_start = np.empty(lmax, dtype=np.int64)
    word_len = np.empty(lmax, dtype=np.int64)
    word_key = np.empty(lmax, dtype=np.uint64)
    n_random = _U64(len(random_ids))
    q = 0
    for i in range(n):
        o = offsets[i]
        length = offsets[i + 1] - o
        k = min(k_rule[i], length - 3)
        key = keys[i]
        sep_a = seg_a[i] - 1
        count = 0
        for p in range(1, length - 1):  # candidates: all but [CLS] (0), A's [SEP] and the last [SEP]
            if p != sep_a:
                order_keys[count] = mix64(key * G + _U64(p) * step + pick)
                cand[count] = p
                count += 1
        if k > 0:
            if whole_word:
                _whole_words(
                    order_keys,
                    cand,
                    count,
                    continues[o : o + length],
                    k,
                    chosen,
                    word_start,
                    word_len,
                    word_key,
                    sk,
                    si,
                    order,
                )
            else:
                _smallest(order_keys, cand, count, k, chosen, sk, si, order)
        q0 = q
        for p in range(length):  # chosen positions, ascending as the format wants (branch-free compaction)
            positions[q] = p
            q += chosen[p]
            chosen[p] = False
        for j in range(q0, q):
            p = positions[j]
            label = ids[o + p]
            pkey = mix64(key * G + _U64(p) * step + mask80)
            if uniform(pkey) < mask_fraction:
                new = mask_id
            elif uniform(mix64(pkey ^ keep50)) < keep_of_rest:
                new = label
            else:
                new = random_ids[mix64(pkey ^ replace) % n_random]
            out[o + p] = new
            labels[j] = label
        pred_offsets[i + 1] = q
    return out, positions[:q].copy(), labels[:q].copy(), pred_offsets
