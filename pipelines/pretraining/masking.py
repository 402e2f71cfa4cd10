"""Stage 6, Mask: static 80/10/10 masked-LM predictions, vectorised over a batch of instances.

Rule (as Google's ``create_masked_lm_predictions``): candidates are all positions but [CLS] and [SEP];
``num_to_predict = min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)))`` (Python's round:
half to even); that many candidates in random order; each becomes [MASK] with probability 0.8, else is
kept with probability 0.5, else replaced by a token drawn uniformly from the vocabulary *excluding*
special and ``[unused*]`` entries (the reference can insert [CLS] or [PAD]); positions sorted.

Randomness: every draw is a hash of (instance id, position, purpose), so an instance's masks do not
depend on which batch or worker masked it.

Speed: :func:`reference_mask` is the readable NumPy definition; the pipeline runs a compiled kernel
(:mod:`bertstream.pipelines.pretraining.kernels.masking`) that gives the same positions, labels and replacements, ~4x faster
(whole-word masking ~35x); tests pin the two together.

Whole-word masking: candidates are words (a token and the ``##`` pieces that follow it in the same
segment); words are taken in random order while they fit in ``num_to_predict`` (a word that would overflow
is skipped, as the reference does), so an instance may get fewer than ``num_to_predict`` predictions.
The selection reads one per-token array, "continues the previous token's word": ``##`` pieces, and, with a
word segmenter (Chinese), also the tokens that Tokenize marked in their ids (:mod:`bertstream.pipelines.pretraining.chinese_words`),
whose marks are removed here, before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import apache_beam as beam
import numpy as np

from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.pretraining.chinese_words import unmark
from bertstream.pipelines.pretraining.kernels import switch
from bertstream.pipelines.pretraining.shipped import resolve
from bertstream.schemas import pretraining as P
from bertstream.schemas.hashing import GOLDEN, mix64_array, uniform_from
from bertstream.schemas.pretraining import num_to_predict
from bertstream.schemas.vocab import MASK, is_reserved

_PICK, _MASK80, _KEEP50, _RANDOM = (np.uint64(x) for x in (0x1, 0x2, 0x3, 0x4))
_NO_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True, slots=True)
class MaskingSpec:
    mask_id: int
    random_ids: np.ndarray  # ids eligible as random replacements
    is_continuation: np.ndarray  # [V] bool: token starts with "##" (whole-word masking)
    masked_lm_prob: float
    max_predictions: int
    whole_word: bool = False
    word_marks: bool = False  # ids of tokens that continue a segmenter word are raised by the vocabulary size


@dataclass(slots=True)
class Masked:
    """Masked input ids (same layout as the input) and predictions, ragged by ``pred_offsets``."""

    ids: np.ndarray
    positions: np.ndarray  # [P] uint16, ascending within each instance
    labels: np.ndarray  # [P] original ids
    pred_offsets: np.ndarray  # [N+1] int64


def word_continuation(ids: np.ndarray, spec: MaskingSpec) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, continues)``: the ids without word marks and ``[T]`` bool, token continues its word (whole-word)."""
    marked = None
    if spec.word_marks:
        ids, marked = unmark(ids, len(spec.is_continuation))
    if not spec.whole_word:
        return ids, np.zeros(0, dtype=bool)  # not read
    if len(ids) and int(ids.max()) >= len(spec.is_continuation):
        raise IndexError("token ids beyond the vocabulary")
    continues = spec.is_continuation[ids]
    return ids, continues if marked is None else continues | marked


def _hash(instance_ids: np.ndarray, positions: np.ndarray, purpose: np.uint64) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = instance_ids * np.uint64(GOLDEN) + positions.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93) + purpose
    return mix64_array(x)


def mask(
    ids: np.ndarray, offsets: np.ndarray, seg_a: np.ndarray, instance_ids: np.ndarray, spec: MaskingSpec
) -> Masked:
    """Mask a batch of instances laid out as ``ids[offsets[i]:offsets[i+1]]`` (compiled).

    Exactly :func:`reference_mask`'s output (positions, labels, replacements), ~4x faster, ~35x with
    whole-word masking.
    """
    # Imported here, not at the top: numba's import (~0.2 s) is paid only by processes that mask.
    from bertstream.pipelines.pretraining.kernels import masking as kernel
    from bertstream.pipelines.pretraining.kernels import readonly

    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    # The kernel does not check bounds: the layout must be consistent (InstanceBatch's always is).
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids) or np.any(lengths < 0):
        raise ValueError("offsets are not a ragged layout of ids")
    if len(seg_a) != len(lengths) or len(instance_ids) != len(lengths):
        raise ValueError("one segment_a_length and one instance id per instance expected")
    ids, continues = word_continuation(ids, spec)
    out, positions, labels, pred_offsets = kernel.mask(
        readonly(ids),
        readonly(offsets),
        readonly(seg_a, np.int64),
        readonly(instance_ids, np.uint64),
        readonly(num_to_predict(lengths, spec.masked_lm_prob, spec.max_predictions), np.int64),
        int(spec.mask_id),
        readonly(spec.random_ids, np.int64),
        readonly(continues, np.bool_),
        bool(spec.whole_word),
    )
    return Masked(ids=out, positions=positions, labels=labels, pred_offsets=pred_offsets)


def reference_mask(
    ids: np.ndarray, offsets: np.ndarray, seg_a: np.ndarray, instance_ids: np.ndarray, spec: MaskingSpec
) -> Masked:
    """:func:`mask` in NumPy, vectorised over an ``[N, Lmax]`` grid: the readable definition tests pin to."""
    ids, continues = word_continuation(ids, spec)
    n = len(offsets) - 1
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return Masked(ids.copy(), z.astype(P.POSITION_DTYPE), z.astype(ids.dtype), np.zeros(1, np.int64))
    lengths = np.diff(offsets)
    lmax = int(lengths.max())
    pos = np.arange(lmax, dtype=np.int64)[None, :]  # [1, Lmax]
    valid = pos < lengths[:, None]  # [N, Lmax]
    candidate = valid & (pos != 0) & (pos != (seg_a.astype(np.int64) - 1)[:, None]) & (pos != (lengths - 1)[:, None])
    iid = np.asarray(instance_ids, dtype=np.uint64)[:, None]
    keys = _hash(iid, pos, _PICK)  # [N, Lmax]
    keys[~candidate] = _NO_KEY
    k = num_to_predict(lengths, spec.masked_lm_prob, spec.max_predictions, within_candidates=True)
    if spec.whole_word:
        rows = np.zeros((n, lmax), dtype=bool)
        cont = np.zeros((n, lmax), dtype=bool)
        cont[valid] = continues
        cont &= candidate
        for i in range(n):
            _pick_whole_words(keys[i], cont[i], int(k[i]), rows[i])
        chosen = rows
    else:
        kmax = int(k.max())
        # The kmax smallest keys of each row, then ordered by key, then the first k[i] of them.
        part = np.argpartition(keys, kmax - 1, axis=1)[:, :kmax]
        order = np.argsort(np.take_along_axis(keys, part, axis=1), axis=1)
        best = np.take_along_axis(part, order, axis=1)
        chosen = np.zeros((n, lmax), dtype=bool)
        r, slot = np.nonzero(np.arange(kmax)[None, :] < k[:, None])
        chosen[r, best[r, slot]] = True
    # Row-major nonzero gives ascending positions per instance: the sorted order the format wants.
    rows_i, cols = np.nonzero(chosen)
    flat = offsets[rows_i] + cols
    labels = ids[flat]
    pkeys = _hash(instance_ids[rows_i].astype(np.uint64), cols, _MASK80)
    u_mask = uniform_from(pkeys)
    u_keep = uniform_from(mix64_array(pkeys ^ _KEEP50))
    rnd = mix64_array(pkeys ^ _RANDOM) % np.uint64(len(spec.random_ids))
    new = np.where(u_mask < 0.8, spec.mask_id, np.where(u_keep < 0.5, labels, spec.random_ids[rnd.astype(np.int64)]))
    out = ids.copy()
    out[flat] = new.astype(ids.dtype)
    counts = np.bincount(rows_i, minlength=n)
    return Masked(
        ids=out,
        positions=cols.astype(P.POSITION_DTYPE),
        labels=labels,
        pred_offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
    )


def _pick_whole_words(keys: np.ndarray, continuation: np.ndarray, k: int, out: np.ndarray) -> None:
    """Reference whole-word selection for one instance (writes chosen positions into ``out``)."""
    cand = np.flatnonzero(keys != _NO_KEY)
    words: list[list[int]] = []
    prev = -2
    for p in cand.tolist():
        if continuation[p] and p == prev + 1 and words:
            words[-1].append(p)
        else:
            words.append([p])
        prev = p
    words.sort(key=lambda w: int(keys[w[0]]))
    taken = 0
    for w in words:
        if taken >= k:
            break
        if taken + len(w) > k:
            continue
        out[w] = True
        taken += len(w)


def masking_spec(
    vocab, masked_lm_prob: float, max_predictions: int, whole_word: bool, word_marks: bool = False
) -> MaskingSpec:
    """Masking parameters for a vocabulary: random replacements exclude special and [unused*] tokens."""
    tokens = vocab.tokens
    random_ids = np.asarray([i for i, t in enumerate(tokens) if not is_reserved(t)], dtype=np.int64)
    if not len(random_ids):
        raise ValueError("vocabulary has no ordinary tokens to draw random replacements from")
    return MaskingSpec(
        mask_id=vocab.id(MASK),
        random_ids=random_ids,
        is_continuation=np.asarray([t.startswith("##") for t in tokens], dtype=bool),
        masked_lm_prob=masked_lm_prob,
        max_predictions=max_predictions,
        whole_word=whole_word,
        word_marks=word_marks,
    )


class _MaskFn(beam.DoFn):
    def __init__(
        self, vocab, masked_lm_prob: float, max_predictions: int, whole_word: bool, word_marks: bool = False
    ) -> None:
        self.vocab = vocab
        self.params = (masked_lm_prob, max_predictions, whole_word, word_marks)
        self.spec: MaskingSpec | None = None

    def setup(self) -> None:
        self.spec = masking_spec(resolve(self.vocab), *self.params)

    def process(self, batch: InstanceBatch) -> Iterator[InstanceBatch]:
        # The kernel or the NumPy path: identical masks (see bertstream.pipelines.pretraining.kernels.switch).
        m = switch.run(
            mask, reference_mask, batch.ids, batch.offsets, batch.segment_a_length, batch.instance_ids, self.spec
        )
        # A new batch, not the input mutated: Beam may hand the same input to other consumers.
        yield replace(batch, ids=m.ids, positions=m.positions, labels=m.labels, pred_offsets=m.pred_offsets)


class MaskInstances(beam.PTransform):
    """``PCollection[InstanceBatch]`` -> the same batches with static masks and their targets."""

    def __init__(
        self, vocab, *, masked_lm_prob: float, max_predictions: int, whole_word: bool, word_marks: bool = False
    ) -> None:
        super().__init__()
        self.fn = _MaskFn(vocab, masked_lm_prob, max_predictions, whole_word, word_marks)

    def expand(self, batches):
        return batches | "Mask" >> beam.ParDo(self.fn)
