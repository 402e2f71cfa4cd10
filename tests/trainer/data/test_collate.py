import numpy as np
import pytest
import torch

from bertstream.trainer.data.collate import Piece, collate, collate_packed, unpack
from bertstream.trainer.data.refs import ShardError, ShardRef
from bertstream.trainer.data.shards import Block, Ragged
from bertstream.trainer.unpad import PLAN_KEYS

REF = ShardRef("/d", 0, "x.arrow", "arrow", 3, 1, "f" * 64)


def ragged(rows: list[list[int]], dtype: str = "<u2") -> Ragged:
    lengths = np.array([len(r) for r in rows], np.int64)
    starts = np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64) + 5  # values do not start at 0
    values = np.concatenate([np.full(5, 999), *[np.array(r) for r in rows]]).astype(dtype)
    return Ragged(values, starts, lengths)


def block() -> Block:
    ids = [[101, 7, 8, 102, 9, 102], list(range(101, 101 + 13)), [101, 5, 102, 6, 102]]
    return Block(
        input_ids=ragged(ids),
        masked_positions=ragged([[1, 4], [2], []]),
        masked_ids=ragged([[7, 9], [103], []]),
        segment_a=np.array([4, 3, 3], np.int16),
        nsp=np.array([1, 0, 1], np.int8),
        instance_id=np.array([1, 2**64 - 1, 2**63], np.uint64),
    )


def test_padding_segments_and_masks() -> None:
    b = block()
    out = collate(
        [Piece(REF, b, np.array([2, 0]), np.array([0, 2])), Piece(REF, b, np.array([1]), np.array([1]))],
        3,
        pad_id=0,
        vocab_size=30522,
    )
    assert out["input_ids"].shape == (3, 16)  # longest is 13 -> 16
    np.testing.assert_array_equal(out["input_ids"][0], [101, 5, 102, 6, 102] + [0] * 11)
    np.testing.assert_array_equal(out["input_ids"][1, :13], list(range(101, 114)))
    np.testing.assert_array_equal(out["token_type_ids"][2], [0, 0, 0, 0, 1, 1] + [0] * 10)
    np.testing.assert_array_equal(out["token_type_ids"][0], [0, 0, 0, 1, 1] + [0] * 11)
    np.testing.assert_array_equal(out["attention_mask"].sum(1), [5, 13, 6])
    np.testing.assert_array_equal(out["masked_lm_positions"], [[0, 0], [2, 0], [1, 4]])
    np.testing.assert_array_equal(out["masked_lm_ids"], [[0, 0], [103, 0], [7, 9]])
    np.testing.assert_array_equal(out["masked_lm_weights"], [[0, 0], [1, 0], [1, 1]])
    np.testing.assert_array_equal(out["next_sentence_labels"], [1, 0, 1])
    assert out["instance_ids"].view(np.uint64).tolist() == [2**63, 2**64 - 1, 1]
    flat, shape = collate_packed(
        [Piece(REF, b, np.array([2, 0, 1]), np.array([0, 2, 1]))], 3, pad_id=0, vocab_size=30522
    )
    assert shape == (3, 16, 2) and flat.dtype == np.int64 and flat.size == 3 * 3 * 16 + 3 * 3 * 2 + 2 * 3
    t = unpack(torch.from_numpy(flat), shape)
    for key, value in out.items():
        np.testing.assert_array_equal(t[key].numpy(), value, err_msg=key)
    made = {"masked_lm_weights", *PLAN_KEYS}  # made on unpacking: the float weights, the unpadded layout
    storages = {t[k].untyped_storage().data_ptr() for k in t if k not in made}
    assert len(storages) == 1  # one buffer: one shared-memory handover per batch
    assert {k: str(v.dtype) for k, v in t.items()} == {
        "input_ids": "torch.int64",
        "token_type_ids": "torch.int64",
        "attention_mask": "torch.int64",
        "masked_lm_positions": "torch.int64",
        "masked_lm_ids": "torch.int64",
        "masked_lm_weights": "torch.float32",
        "next_sentence_labels": "torch.int64",
        "instance_ids": "torch.int64",
        "unpad_index": "torch.int64",
        "unpad_inverse": "torch.int64",
        "cu_seqlens": "torch.int32",
    }
    # the unpadded layout of lengths 5, 13, 6: 24 real rows, 40 filler rows up to the quantum (64)
    assert t["cu_seqlens"].tolist() == [0, 5, 18, 24, 64]
    assert t["unpad_index"][:7].tolist() == [0, 1, 2, 3, 4, 16, 17]
    assert t["unpad_inverse"][16:19].tolist() == [5, 6, 7] and int(t["unpad_inverse"][5]) == 64


@pytest.mark.parametrize(("rows", "width"), [([0], 8), ([0, 2], 8), ([1], 16)])
def test_width_is_a_multiple_of_eight(rows: list[int], width: int) -> None:
    out = collate([Piece(REF, block(), np.array(rows), np.arange(len(rows)))], len(rows), pad_id=3, vocab_size=200)
    assert out["input_ids"].shape[1] == width
    assert (out["input_ids"][out["attention_mask"] == 0] == 3).all()


def test_pad_id_from_the_manifest() -> None:
    out = collate([Piece(REF, block(), np.array([0]), np.array([0]))], 1, pad_id=0, vocab_size=200)
    assert out["input_ids"][0, 6:].tolist() == [0, 0]


def test_writer_bugs_are_named() -> None:
    b = block()
    b.masked_positions.values[b.masked_positions.starts[0] + 1] = 6  # == length of row 0
    with pytest.raises(ShardError, match="instance 0000000000000001 has a masked position past its length"):
        collate([Piece(REF, b, np.array([0]), np.array([0]))], 1, pad_id=0, vocab_size=200)
    with pytest.raises(ShardError, match=r"x\.arrow: instance ffffffffffffffff has an id outside 0..109"):
        collate([Piece(REF, block(), np.array([1]), np.array([0]))], 1, pad_id=0, vocab_size=110)


def test_blocks_with_nothing_masked() -> None:
    b = block()
    empty = Block(
        b.input_ids,
        Ragged(np.zeros(0, np.uint16), np.zeros(3, np.int64), np.zeros(3, np.int64)),
        Ragged(np.zeros(0, np.uint16), np.zeros(3, np.int64), np.zeros(3, np.int64)),
        b.segment_a,
        b.nsp,
        b.instance_id,
    )
    out = collate(
        [Piece(REF, empty, np.array([0]), np.array([0])), Piece(REF, b, np.array([0]), np.array([1]))],
        2,
        pad_id=0,
        vocab_size=200,
    )
    np.testing.assert_array_equal(out["masked_lm_positions"], [[0, 0], [1, 4]])
    np.testing.assert_array_equal(out["masked_lm_weights"], [[0, 0], [1, 1]])
