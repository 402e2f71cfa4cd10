"""Google's ``create_instances_from_document`` for a whole work unit, compiled.

A statement-by-statement transcription of :func:`bertstream.pipelines.pretraining.instances.document_instances` (the readable
reference), with ``random.Random(combine(key, pass))`` replaced by :mod:`bertstream.pipelines.pretraining.kernels.mt19937`, which
draws the same numbers. ``tests/pipelines/pretraining/kernels/test_instances.py`` pins the two together. The Python
loop spent ~5 us per instance in the interpreter (``randint``'s three Python frames per draw, the loop
itself, instance ids hashed with Python ints); compiled, it is ~0.3 us, a sixth of it seeding the
generator (~3 us per document and pass, the first 624-word twist included; copying the shared
``init_genrand`` state saves a third of the seeding).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bertstream.pipelines.pretraining.kernels import mt19937 as mt
from bertstream.pipelines.pretraining.kernels.hashing import combine

_U64 = np.uint64


@njit(cache=True)
def _document(d, rng, doc_sent, sent_tok, max_num_tokens, short_seq_prob, spans, nsp, n):
    """Instances of document ``d`` appended to ``spans``/``nsp`` from row ``n``; returns the new row count."""
    n_docs = len(doc_sent) - 1
    s_begin, s_end = doc_sent[d], doc_sent[d + 1]
    target = max_num_tokens
    if mt.random(rng) < short_seq_prob:
        target = mt.randint(rng, 2, max_num_tokens)
    chunk_start = s_begin
    current_length = 0
    i = s_begin
    while i < s_end:
        current_length += sent_tok[i + 1] - sent_tok[i]
        if i == s_end - 1 or current_length >= target:
            n_chunk = i - chunk_start + 1
            a_end = mt.randint(rng, 1, n_chunk - 1) if n_chunk >= 2 else 1
            a0 = sent_tok[chunk_start]
            a1 = sent_tok[chunk_start + a_end]
            if n_chunk == 1 or mt.random(rng) < 0.5:
                is_random_next = 1
                target_b = target - (a1 - a0)
                r = d
                for _ in range(10):
                    r = mt.randint(rng, 0, n_docs - 1)
                    if r != d:
                        break
                r_begin, r_end = doc_sent[r], doc_sent[r + 1]
                j = r_begin + mt.randint(rng, 0, r_end - r_begin - 1)
                b0 = sent_tok[j]
                while j < r_end:
                    j += 1
                    if sent_tok[j] - b0 >= target_b:
                        break
                b1 = sent_tok[j]
                i -= n_chunk - a_end  # the chunk's unused sentences are used again
            else:
                is_random_next = 0
                b0 = a1
                b1 = sent_tok[i + 1]
            la, lb = a1 - a0, b1 - b0
            while la + lb > max_num_tokens:
                if la > lb:
                    if mt.random(rng) < 0.5:
                        a0 += 1
                    else:
                        a1 -= 1
                    la -= 1
                else:
                    if mt.random(rng) < 0.5:
                        b0 += 1
                    else:
                        b1 -= 1
                    lb -= 1
            spans[n, 0] = a0
            spans[n, 1] = a1
            spans[n, 2] = b0
            spans[n, 3] = b1
            nsp[n] = is_random_next
            n += 1
            chunk_start = i + 1
            current_length = 0
        i += 1
    return n


@njit(cache=True)
def unit_instances(doc_keys, doc_sent, sent_tok, pass_index, doc_start, doc_end, max_num_tokens, short_seq_prob):
    """``(instance_ids, spans, is_random_next)`` of documents ``doc_start:doc_end`` for one pass.

    A chunk consumes at least one sentence (A does), so a document gives at most one instance per
    sentence: the unit's sentence count bounds the output, which is allocated once and trimmed.
    """
    bound = doc_sent[doc_end] - doc_sent[doc_start]
    spans = np.empty((bound, 4), dtype=np.int64)
    nsp = np.empty(bound, dtype=np.int8)
    ids = np.empty(bound, dtype=np.uint64)
    base = mt.genrand_base()
    rng = np.empty_like(base)
    p = _U64(pass_index)
    n = 0
    for d in range(doc_start, doc_end):
        doc_seed = combine(doc_keys[d], p)
        mt.seed_from(rng, base, doc_seed)
        start = n
        n = _document(d, rng, doc_sent, sent_tok, max_num_tokens, short_seq_prob, spans, nsp, n)
        for k in range(start, n):  # instance_id(key, pass, k): combine(combine(key, pass), k + 1)
            ids[k] = combine(doc_seed, _U64(k - start + 1))
    return ids[:n].copy(), spans[:n].copy(), nsp[:n].copy()


@njit(cache=True)
def assemble(pool_ids, spans, cls_id, sep_id):
    """``[CLS] A [SEP] B [SEP]`` of every instance: ``(ids, offsets, segment_a_length)``."""
    n = spans.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    seg_a = np.empty(n, dtype=np.int16)
    offsets[0] = 0
    for k in range(n):
        la = spans[k, 1] - spans[k, 0]
        offsets[k + 1] = offsets[k] + la + (spans[k, 3] - spans[k, 2]) + 3
        seg_a[k] = la + 2
    out = np.empty(offsets[n], dtype=pool_ids.dtype)
    for k in range(n):
        o = offsets[k]
        out[o] = cls_id  # setitem casts to the ids' dtype
        o += 1
        for t in range(spans[k, 0], spans[k, 1]):
            out[o] = pool_ids[t]
            o += 1
        out[o] = sep_id
        o += 1
        for t in range(spans[k, 2], spans[k, 3]):
            out[o] = pool_ids[t]
            o += 1
        out[o] = sep_id
    return out, offsets, seg_a
