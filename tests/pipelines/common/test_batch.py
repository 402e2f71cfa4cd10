from __future__ import annotations

import numpy as np
import pytest

from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.pretraining.masking import mask, masking_spec
from bertstream.schemas.masking import MaskingSettings
from tests.schemas.test_masking import random_batch, toy_vocab


def masked_batch(seed: int, n: int) -> InstanceBatch:
    vocab = toy_vocab()
    rng = np.random.default_rng(seed)
    ids, offsets, seg_a, iids = random_batch(rng, n, vocab)
    m = mask(ids, offsets, seg_a, iids, masking_spec(vocab, MaskingSettings(0.15, 20)))
    nsp = rng.integers(0, 2, n).astype(np.int8)
    return InstanceBatch(iids, m.ids, offsets.astype(np.int64), seg_a, nsp, m.positions, m.labels, m.pred_offsets)


def rows(b: InstanceBatch) -> list[tuple]:
    """Each instance's fields, sliced one by one: what take and concat must agree with."""
    return [
        (
            int(b.instance_ids[i]),
            b.ids[b.offsets[i] : b.offsets[i + 1]].tolist(),
            int(b.segment_a_length[i]),
            int(b.next_sentence_label[i]),
            b.positions[b.pred_offsets[i] : b.pred_offsets[i + 1]].tolist(),
            b.labels[b.pred_offsets[i] : b.pred_offsets[i + 1]].tolist(),
        )
        for i in range(len(b))
    ]


def test_take_gives_the_rows_in_order():
    b = masked_batch(0, 300)
    index = np.random.default_rng(1).permutation(300)[:200]
    t = b.take(index)
    full = rows(b)
    assert rows(t) == [full[i] for i in index]
    assert t.offsets.dtype == np.int64 and t.pred_offsets.dtype == np.int64
    assert len(b.take(np.zeros(0, np.int64))) == 0


def test_concat_and_wire_format_round_trip():
    parts = [masked_batch(s, n) for s, n in ((2, 50), (3, 1), (4, 120))]
    whole = InstanceBatch.concat(parts)
    assert rows(whole) == sum((rows(p) for p in parts), [])
    back = InstanceBatch.from_bytes(whole.to_bytes())
    assert rows(back) == rows(whole)
    assert back.to_bytes() == whole.to_bytes()


def test_concat_wire_decodes_part_by_part_into_the_concatenation():
    parts = [masked_batch(seed, n) for seed, n in enumerate((7, 300, 1, 45))]
    wires = [p.to_bytes() for p in parts]
    sizes = [InstanceBatch.wire_sizes(w[: InstanceBatch.WIRE_HEADER_BYTES]) for w in wires]
    assert InstanceBatch.concat_wire(sizes, iter(wires)).to_bytes() == InstanceBatch.concat(parts).to_bytes()
    with pytest.raises(ValueError, match="headers said"):
        InstanceBatch.concat_wire(sizes, iter(wires[:-1]))
