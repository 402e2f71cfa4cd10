"""Stage 6, Mask: static masked-LM predictions for a batch of instances, by the rule of ``bertstream.schemas.masking``.

The rule (80/10/10, the count, whole words) is the contract's, keyed here by instance id: an instance's masks
do not depend on which batch or worker masked it. The stage runs the rule's compiled kernel
(:mod:`bertstream.pipelines.pretraining.kernels.masking`, ~6x faster than the rule's NumPy form on one core,
~12x with whole-word masking), which a test holds to :func:`reference_mask`, the rule on this stage's ragged
layout; a process that has not started numba yet runs that NumPy form until it has taken numba's start
(:mod:`bertstream.pipelines.pretraining.kernels.switch`): a small run never pays numba's import (~0.5 s,
~90 MB) for a few batches, and the shards are the same bytes.

With a word segmenter (Chinese), whole words are also the tokens that Tokenize marked in their ids
(:mod:`bertstream.pipelines.pretraining.chinese_words`), whose marks are removed here, before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import apache_beam as beam
import numpy as np

from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.pretraining.chinese_words import unmark
from bertstream.pipelines.pretraining.shipped import resolve
from bertstream.schemas import masking as rule_
from bertstream.schemas import pretraining as P
from bertstream.schemas.masking import MaskingRule, MaskingSettings, num_to_predict


@dataclass(frozen=True, slots=True)
class MaskingSpec:
    rule: MaskingRule
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
    is_continuation = spec.rule.is_continuation
    marked = None
    if spec.word_marks:
        ids, marked = unmark(ids, len(is_continuation))
    if not spec.rule.whole_word:
        return ids, np.zeros(0, dtype=bool)  # not read
    if len(ids) and int(ids.max()) >= len(is_continuation):
        raise IndexError("token ids beyond the vocabulary")
    continues = is_continuation[ids]
    return ids, continues if marked is None else continues | marked


def _check_layout(ids: np.ndarray, offsets: np.ndarray, seg_a: np.ndarray, instance_ids: np.ndarray) -> np.ndarray:
    """``offsets`` as int64, checked: the kernel does not check bounds, so the layout must be consistent
    (InstanceBatch's always is)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids) or np.any(lengths < 0):
        raise ValueError("offsets are not a ragged layout of ids")
    if len(seg_a) != len(lengths) or len(instance_ids) != len(lengths):
        raise ValueError("one segment_a_length and one instance id per instance expected")
    return offsets


def mask(
    ids: np.ndarray, offsets: np.ndarray, seg_a: np.ndarray, instance_ids: np.ndarray, spec: MaskingSpec
) -> Masked:
    """Mask a batch of instances laid out as ``ids[offsets[i]:offsets[i+1]]``: :func:`compiled_mask`, or
    :func:`reference_mask` while numba is not worth starting in this process (the same arrays)."""
    from bertstream.pipelines.pretraining.kernels import switch

    offsets = _check_layout(ids, offsets, seg_a, instance_ids)
    return switch.run(compiled_mask, reference_mask, ids, offsets, seg_a, instance_ids, spec)


def compiled_mask(
    ids: np.ndarray, offsets: np.ndarray, seg_a: np.ndarray, instance_ids: np.ndarray, spec: MaskingSpec
) -> Masked:
    """:func:`mask` by the compiled kernel: exactly :func:`reference_mask`'s output (positions, labels,
    replacements)."""
    # Imported here, not at the top: numba's import (~0.5 s) is paid only by processes that run a kernel.
    from bertstream.pipelines.pretraining.kernels import masking as kernel
    from bertstream.pipelines.pretraining.kernels import readonly

    offsets = _check_layout(ids, offsets, seg_a, instance_ids)
    lengths = np.diff(offsets)
    ids, continues = word_continuation(ids, spec)
    rule = spec.rule
    out, positions, labels, pred_offsets = kernel.mask(
        readonly(ids),
        readonly(offsets),
        readonly(seg_a, np.int64),
        readonly(instance_ids, np.uint64),
        readonly(num_to_predict(lengths, rule.probability, rule.max_predictions), np.int64),
        int(rule.mask_id),
        readonly(rule.random_ids, np.int64),
        readonly(continues, np.bool_),
        bool(rule.whole_word),
        readonly(np.array([rule.settings.mask_fraction, rule.settings.keep_of_rest], np.float64)),
        readonly(np.array([rule_.POSITION_STEP, rule_.PICK, rule_.MASK80, rule_.KEEP50, rule_.RANDOM], np.uint64)),
    )
    return Masked(ids=out, positions=positions, labels=labels, pred_offsets=pred_offsets)


def reference_mask(
    ids: np.ndarray, offsets: np.ndarray, seg_a: np.ndarray, instance_ids: np.ndarray, spec: MaskingSpec
) -> Masked:
    """The rule (``bertstream.schemas.masking.mask``) keyed by instance id, on this stage's ragged layout: what
    :func:`mask` is held to."""
    ids, continues = word_continuation(ids, spec)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    n = len(lengths)
    valid = np.arange(int(lengths.max(initial=0)))[None, :] < lengths[:, None]  # [N, Lmax]
    grid = np.zeros(valid.shape, ids.dtype)
    grid[valid] = ids
    cont = None
    if spec.rule.whole_word:
        cont = np.zeros(valid.shape, bool)
        cont[valid] = continues
    m = rule_.mask(grid, lengths, seg_a, instance_ids, spec.rule, cont)
    return Masked(
        ids=m.input_ids[valid],
        positions=m.positions.astype(P.POSITION_DTYPE),
        labels=m.labels,
        pred_offsets=np.concatenate(([0], np.cumsum(np.bincount(m.rows, minlength=n)))).astype(np.int64),
    )


def masking_spec(vocab, settings: MaskingSettings, word_marks: bool = False) -> MaskingSpec:
    """The rule with ``settings`` over a vocabulary: random replacements exclude special and [unused*] tokens."""
    return MaskingSpec(MaskingRule.for_vocab(vocab, settings), word_marks)


class _MaskFn(beam.DoFn):
    def __init__(self, vocab, settings: MaskingSettings, word_marks: bool = False) -> None:
        self.vocab = vocab
        self.settings = settings
        self.word_marks = word_marks
        self.spec: MaskingSpec | None = None

    def setup(self) -> None:
        self.spec = masking_spec(resolve(self.vocab), self.settings, self.word_marks)

    def process(self, batch: InstanceBatch) -> Iterator[InstanceBatch]:
        assert self.spec is not None, "setup() loads the spec"
        m = mask(batch.ids, batch.offsets, batch.segment_a_length, batch.instance_ids, self.spec)
        # A new batch, not the input mutated: Beam may hand the same input to other consumers.
        yield replace(batch, ids=m.ids, positions=m.positions, labels=m.labels, pred_offsets=m.pred_offsets)


class MaskInstances(beam.PTransform):
    """``PCollection[InstanceBatch]`` -> the same batches with static masks (the rule with ``settings``) and their
    targets."""

    def __init__(self, vocab, settings: MaskingSettings, *, word_marks: bool = False) -> None:
        super().__init__()
        self.fn = _MaskFn(vocab, settings, word_marks)

    def expand(self, batches):
        return batches | "Mask" >> beam.ParDo(self.fn)
