"""The Mask stage's entry point: the rule keyed by instance id on ragged batches (the kernel against the rule:
``kernels/test_masking.py``; the rule itself: ``tests/schemas/test_masking.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from bertstream.pipelines.pretraining.masking import mask, masking_spec
from bertstream.schemas.masking import MaskingSettings
from tests.schemas.test_masking import random_batch, toy_vocab


def test_an_instance_masks_the_same_whatever_its_batch():
    vocab = toy_vocab()
    spec = masking_spec(vocab, MaskingSettings(0.15, 20))
    ids, offsets, seg_a, iids = random_batch(np.random.default_rng(1), 300, vocab)
    whole = mask(ids, offsets, seg_a, iids, spec)
    for i in (0, 17, 299):
        one = mask(
            ids[offsets[i] : offsets[i + 1]], offsets[i : i + 2] - offsets[i], seg_a[i : i + 1], iids[i : i + 1], spec
        )
        assert np.array_equal(one.ids, whole.ids[offsets[i] : offsets[i + 1]])
        assert np.array_equal(one.positions, whole.positions[whole.pred_offsets[i] : whole.pred_offsets[i + 1]])


def test_inconsistent_layouts_are_refused_before_the_kernel():
    spec = masking_spec(toy_vocab(), MaskingSettings(0.15, 20, whole_word_mask=True))
    ids = np.array([2, 30, 3, 40, 3], np.uint16)
    iid = np.zeros(1, np.uint64)
    with pytest.raises(ValueError, match="ragged layout"):
        mask(ids, np.array([0, 6]), np.array([3], np.int16), iid, spec)
    with pytest.raises(ValueError, match="one segment_a_length"):
        mask(ids, np.array([0, 5]), np.array([3, 3], np.int16), iid, spec)
    with pytest.raises(IndexError, match="beyond the vocabulary"):
        mask(np.array([2, 30, 3, 60000, 3], np.uint16), np.array([0, 5]), np.array([3], np.int16), iid, spec)
