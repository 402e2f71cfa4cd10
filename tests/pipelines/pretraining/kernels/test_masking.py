"""The compiled masking kernel held to the rule (``bertstream.schemas.masking``): the same positions, labels and
replacements."""

from __future__ import annotations

import numpy as np
import pytest

from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.pretraining.instances import assemble, unit_instances
from bertstream.pipelines.pretraining.masking import Masked, compiled_mask, masking_spec, reference_mask
from bertstream.schemas import masking as rule
from bertstream.schemas.masking import MaskingSettings
from tests.schemas.test_masking import random_batch, toy_vocab


def assert_same(ours: Masked, theirs: Masked) -> None:
    for field in ("ids", "positions", "labels", "pred_offsets"):
        a, b = getattr(ours, field), getattr(theirs, field)
        assert a.dtype == b.dtype, field
        assert np.array_equal(a, b), field


def real_batch(pool, vocab, max_seq_length: int, pass_index: int) -> InstanceBatch:
    """A work unit's instances as the Mask stage receives them: decoded from bytes (read-only arrays)."""
    raw = unit_instances(pool, pass_index, 0, pool.num_docs, max_seq_length - 3, 0.1)
    ids, offsets, seg_a = assemble(pool, raw, vocab.id("[CLS]"), vocab.id("[SEP]"))
    z = np.zeros(len(raw.instance_ids) + 1, np.int64)
    batch = InstanceBatch(
        raw.instance_ids, ids, offsets, seg_a, raw.is_random_next, ids[:0].astype(np.uint16), ids[:0], z
    )
    return InstanceBatch.from_bytes(batch.to_bytes())


# (max_seq_length, masked_lm_prob, max_predictions): BERT's two phases and a short one where k is 1 or 2.
SETTINGS = [(128, 0.15, 20), (512, 0.15, 76), (16, 0.15, 5), (128, 0.4, 40)]


@pytest.mark.parametrize("whole_word", [False, True])
@pytest.mark.parametrize("max_seq_length,masked_lm_prob,max_predictions", SETTINGS)
def test_kernel_equals_numpy_on_wikipedia_and_books(
    wiki_books_pool, max_seq_length, masked_lm_prob, max_predictions, whole_word
):
    pool, vocab = wiki_books_pool
    b = real_batch(pool, vocab, max_seq_length, pass_index=2)
    spec = masking_spec(vocab, MaskingSettings(masked_lm_prob, max_predictions, whole_word))
    ours = compiled_mask(b.ids, b.offsets, b.segment_a_length, b.instance_ids, spec)
    assert_same(ours, reference_mask(b.ids, b.offsets, b.segment_a_length, b.instance_ids, spec))
    assert ours.ids.flags.writeable and len(ours.positions) > len(b) // 2


@pytest.mark.parametrize("whole_word", [False, True])
def test_kernel_equals_numpy_on_the_demo_corpus(demo_pool, whole_word):
    pool, vocab = demo_pool
    b = real_batch(pool, vocab, 128, pass_index=0)
    spec = masking_spec(vocab, MaskingSettings(0.15, 20, whole_word))
    assert_same(
        compiled_mask(b.ids, b.offsets, b.segment_a_length, b.instance_ids, spec),
        reference_mask(b.ids, b.offsets, b.segment_a_length, b.instance_ids, spec),
    )


@pytest.mark.parametrize("whole_word", [False, True])
@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_kernel_equals_numpy_on_random_batches(whole_word, dtype):
    # Every length from the shortest instance (5 tokens: k = 1 of 2 candidates) up; a quarter of the toy
    # vocabulary are continuation pieces, so words of several pieces are common.
    vocab = toy_vocab()
    spec = masking_spec(vocab, MaskingSettings(0.15, 20, whole_word))
    rng = np.random.default_rng(3)
    ids, offsets, seg_a, iids = random_batch(rng, 3000, vocab, max_len=300)
    ids = ids.astype(dtype)
    assert_same(compiled_mask(ids, offsets, seg_a, iids, spec), reference_mask(ids, offsets, seg_a, iids, spec))
    one = slice(0, 1)
    five = np.array([2, 30, 3, 40, 3], dtype=dtype)
    assert_same(
        compiled_mask(five, np.array([0, 5]), np.array([3], np.int16), iids[one], spec),
        reference_mask(five, np.array([0, 5]), np.array([3], np.int16), iids[one], spec),
    )
    empty = compiled_mask(ids[:0], np.zeros(1, np.int64), seg_a[:0], iids[:0], spec)
    assert_same(empty, reference_mask(ids[:0], np.zeros(1, np.int64), seg_a[:0], iids[:0], spec))


def test_kernel_follows_the_rules_constants(monkeypatch):
    # The kernel takes the split from the settings and the draws' constants from the rule at each call: a change
    # there changes both (numba would keep module globals frozen in its cache).
    for name, value in (("PICK", 11), ("MASK80", 12)):
        monkeypatch.setattr(rule, name, value)
    vocab = toy_vocab()
    ids, offsets, seg_a, iids = random_batch(np.random.default_rng(4), 2000, vocab)
    for whole_word in (False, True):
        settings = MaskingSettings(0.15, 20, whole_word, mask_fraction=0.5, keep_fraction=0.15, random_fraction=0.35)
        spec = masking_spec(vocab, settings)
        ours = compiled_mask(ids, offsets, seg_a, iids, spec)
        assert_same(ours, reference_mask(ids, offsets, seg_a, iids, spec))
    row = np.repeat(np.arange(len(seg_a)), np.diff(ours.pred_offsets))
    share = float(np.mean(ours.ids[offsets[row] + ours.positions] == spec.rule.mask_id))
    assert abs(share - 0.5) < 0.02, share  # the patched threshold took effect (~5,000 predictions)
