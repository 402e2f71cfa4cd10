"""The ragged gather kernel against NumPy's ``values[concat_ranges(starts, ends)]``, on real token ids."""

from __future__ import annotations

import numpy as np

from bertstream.pipelines.common.ragged import concat_ranges
from bertstream.pipelines.pretraining.kernels import gather, readonly


def test_sentences_gathered_in_any_order_are_numpy_s_gather(demo_pool):
    pool, _ = demo_pool
    ids, bounds = readonly(pool.ids), pool.sent_tok
    rng = np.random.default_rng(0)
    sentences = len(bounds) - 1
    for order in (rng.permutation(sentences), rng.integers(0, sentences, 500), np.arange(0), np.arange(sentences)):
        starts, ends = readonly(bounds[order], np.int64), readonly(bounds[order + 1], np.int64)
        got = gather.take_ranges(ids, starts, ends)
        assert got.dtype == ids.dtype
        assert np.array_equal(got, ids[concat_ranges(starts, ends)])
    empty = readonly(np.array([5, 5]), np.int64)  # empty ranges add nothing
    assert len(gather.take_ranges(ids, empty, empty)) == 0
