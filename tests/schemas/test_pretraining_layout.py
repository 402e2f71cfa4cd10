from __future__ import annotations

import struct
import warnings

import numpy as np
import pyarrow as pa
import pytest

from bertstream.schemas import pretraining as P
from bertstream.schemas import wds
from bertstream.schemas.manifest import Manifest, ShardInfo, shard_name, vocab_entry
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab


def test_arrow_schema_metadata_round_trip():
    s = P.arrow_schema("uint16", "ab" * 32, {"max_seq_length": 128})
    assert P.check_schema(s) == "uint16"
    meta = P.read_metadata(s)
    assert meta == {
        "schema_version": 1,
        "kind": "pretraining",
        "vocab_sha256": "ab" * 32,
        "parameters": {"max_seq_length": 128},
    }
    assert P.check_schema(P.arrow_schema("int32")) == "int32"


def test_foreign_or_future_schemas_are_refused():
    with pytest.raises(SchemaError, match="not a bertstream shard"):
        P.check_schema(pa.schema([("x", pa.int32())]))
    s = P.arrow_schema("uint16")
    future = s.with_metadata({**s.metadata, b"bertstream.schema_version": b"2"})
    with pytest.raises(SchemaError, match="schema version 2"):
        P.check_schema(future, source="shard-7")


@pytest.mark.parametrize("width", [2, 4])
def test_wds_payload_round_trip(width):
    ids = np.array([2, 500, 4, 70000 if width == 4 else 700, 3], dtype=np.int64)
    payload = wds.encode_instance(ids, 3, np.array([1, 3]), np.array([77, 78]), 1, 2**64 - 5, width)
    d = wds.decode_payload(payload)
    assert d["input_ids"].tolist() == ids.tolist() and d["masked_lm_positions"].tolist() == [1, 3]
    assert d["masked_lm_ids"].tolist() == [77, 78] and d["segment_a_length"] == 3
    assert d["next_sentence_label"] == 1 and d["instance_id"] == 2**64 - 5
    assert wds.sample_key(2**64 - 5) == "fffffffffffffffb"


def test_wds_payload_errors_are_named():
    payload = wds.encode_instance(np.array([2, 5, 3]), 2, np.array([1]), np.array([9]), 0, 1, 2)
    with pytest.raises(SchemaError, match="sample x: .*header says"):
        wds.decode_payload(payload[:-1], source="sample x")
    with pytest.raises(SchemaError, match="no .bert member"):
        wds.decode_sample({"__key__": "k", "json": b"{}"})


def test_decode_sample_takes_the_sample_or_its_bert_bytes_and_gives_writable_arrays():
    pytest.importorskip("torch")
    from torch.utils.data import default_collate

    payload = wds.encode_instance(np.array([2, 5, 6, 3]), 2, np.array([1, 2]), np.array([9, 8]), 0, 7, 2)
    sample = {"__key__": wds.sample_key(7), "__url__": "shard.tar", wds.EXTENSION: payload}
    a, b = wds.decode_sample(sample), wds.decode_sample(sample["bert"])
    assert all(np.array_equal(a[k], b[k]) for k in a) and a["instance_id"] == 7
    assert a["input_ids"].flags.writeable and a["masked_lm_ids"].flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The given NumPy array is not writable" would raise here
        batch = default_collate([a, b])
    assert batch["input_ids"].tolist() == [[2, 5, 6, 3]] * 2 and batch["masked_lm_positions"].tolist() == [[1, 2]] * 2
    assert payload == wds.encode_instance(np.array([2, 5, 6, 3]), 2, np.array([1, 2]), np.array([9, 8]), 0, 7, 2)


def test_decode_sample_gives_ids_an_embedding_takes():
    # the shard stores uint16 ids; torch's nn.Embedding refuses a uint16 tensor ("... got CPUUInt16Type")
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate

    payload = wds.encode_instance(np.array([2, 5, 6, 3]), 2, np.array([1, 2]), np.array([9, 8]), 0, 7, 2)
    assert wds.decode_payload(payload)["input_ids"].dtype == np.uint16  # the stored width, kept by the raw view
    batch = default_collate([wds.decode_sample(payload)])
    assert {batch[k].dtype for k in ("input_ids", "masked_lm_positions", "masked_lm_ids")} == {torch.int64}
    embedded = torch.nn.Embedding(10, 4)(batch["input_ids"])
    assert embedded.shape == (1, 4, 4)
    assert batch["masked_lm_ids"].tolist() == [[9, 8]]


def test_manifest_round_trip_and_version_check():
    shard = ShardInfo(shard_name("pretrain", 3, 8, "arrow"), "arrow", 10, 100, "0" * 64)
    assert shard.path == "pretrain-00003-of-00008.arrow"
    m = Manifest(
        kind="pretraining",
        vocab=vocab_entry(Vocab(SPECIAL_TOKENS), lowercase=True),
        parameters={"a": 1},
        seed=1,
        shards=(shard,),
    )
    again = Manifest.from_json(m.to_json())
    assert again == m
    with pytest.raises(SchemaError, match="schema version 9"):
        Manifest.from_json(m.to_json().replace('"schema_version": 1', '"schema_version": 9'))
    with pytest.raises(SchemaError, match="not a bertstream manifest"):
        Manifest.from_json('{"format": "other"}')
    with pytest.raises(SchemaError, match="sha256"):
        ShardInfo("p", "arrow", 1, 1, "short")


def test_wds_header_dtype_is_the_documented_table():
    offsets = {name: wds.HEADER.fields[name][1] for name in wds.HEADER.names}
    assert offsets == {
        "version": 0,
        "id_width": 1,
        "n": 2,
        "m": 4,
        "segment_a_length": 6,
        "next_sentence_label": 8,
        "reserved": 9,
        "instance_id": 10,
    }
    assert wds.HEADER_SIZE == wds.HEADER.itemsize == 18
    # The same bytes as the struct format the layout was first written with.
    payload = wds.encode_instance(np.array([2, 9, 3]), -3, np.array([1]), np.array([8]), -1, 2**63 + 7, 2)
    assert payload[:18] == struct.pack("<BBHHhbxQ", 1, 2, 3, 1, -3, -1, 2**63 + 7)


def _batch(width: int, rows: int = 5):
    rng = np.random.default_rng(width)
    n = rng.integers(3, 40, rows)
    m = rng.integers(0, 6, rows)
    high = 90000 if width == 4 else 30000
    return dict(
        input_ids=rng.integers(0, high, int(n.sum())),
        offsets=np.concatenate([[0], np.cumsum(n)]),
        segment_a_length=rng.integers(1, 3, rows).astype(np.int16),
        masked_lm_positions=rng.integers(0, 3, int(m.sum())).astype(np.uint16),
        masked_lm_ids=rng.integers(0, high, int(m.sum())),
        pred_offsets=np.concatenate([[0], np.cumsum(m)]),
        next_sentence_label=rng.integers(0, 2, rows).astype(np.int8),
        instance_id=rng.integers(0, 2**63, rows).astype(np.uint64),
    )


@pytest.mark.parametrize("id_type", ["uint16", "int32"])
def test_wds_batch_encoder_and_vectorised_header_decoder_agree(id_type):
    b = _batch(2 if id_type == "uint16" else 4)
    payloads = wds.encode_batch(**b, id_type=id_type)
    off, poff = b["offsets"], b["pred_offsets"]
    for i, p in enumerate(payloads):
        one = wds.encode_instance(
            b["input_ids"][off[i] : off[i + 1]],
            int(b["segment_a_length"][i]),
            b["masked_lm_positions"][poff[i] : poff[i + 1]],
            b["masked_lm_ids"][poff[i] : poff[i + 1]],
            int(b["next_sentence_label"][i]),
            int(b["instance_id"][i]),
            2 if id_type == "uint16" else 4,
        )
        assert p == one
    # Payloads at arbitrary (odd) offsets of one buffer, as in a tar: every field recovered.
    buf, at = b"", []
    for p in payloads:
        buf += b"\x00" * 3
        at.append(len(buf))
        buf += p
    u8 = np.frombuffer(buf, np.uint8)
    h = wds.decode_headers(u8, np.array(at), np.array([len(p) for p in payloads]), id_type, source="s")
    assert h.n.tolist() == np.diff(off).tolist() and h.m.tolist() == np.diff(poff).tolist()
    assert h.segment_a_length.tolist() == b["segment_a_length"].tolist()
    assert h.next_sentence_label.tolist() == b["next_sentence_label"].tolist()
    assert h.instance_id.tolist() == b["instance_id"].tolist()
    dt = np.dtype("<u2" if id_type == "uint16" else "<i4")
    for i in range(len(payloads)):
        ids = u8[h.input_ids_at[i] : h.input_ids_at[i] + h.n[i] * dt.itemsize].view(dt)
        pos = u8[h.positions_at[i] : h.positions_at[i] + h.m[i] * 2].view("<u2")
        mids = u8[h.masked_ids_at[i] : h.masked_ids_at[i] + h.m[i] * dt.itemsize].view(dt)
        assert ids.tolist() == b["input_ids"][off[i] : off[i + 1]].tolist()
        assert pos.tolist() == b["masked_lm_positions"][poff[i] : poff[i + 1]].tolist()
        assert mids.tolist() == b["masked_lm_ids"][poff[i] : poff[i + 1]].tolist()


def test_wds_header_decoder_names_the_bad_member_or_the_shard():
    b = _batch(2, rows=3)
    payloads = wds.encode_batch(**b, id_type="uint16")
    buf = b"".join(payloads)
    at = np.concatenate([[0], np.cumsum([len(p) for p in payloads])[:-1]])
    sizes = np.array([len(p) for p in payloads])
    u8 = np.frombuffer(buf, np.uint8)
    with pytest.raises(SchemaError, match="^shard: id width 2, the manifest vocab says 4$"):
        wds.decode_headers(u8, at, sizes, "int32", source="shard")
    with pytest.raises(ValueError, match=f"member at byte {at[1] + 100}: {sizes[1] - 1} bytes, its header says"):
        wds.decode_headers(u8, at, sizes - (np.arange(3) == 1), "uint16", source="shard", member_at=at + 100)
    mixed = bytearray(buf)
    mixed[at[2] + 1] = 4
    with pytest.raises(ValueError, match=f"member at byte {at[2]}: id width 4, expected 2"):
        wds.decode_headers(np.frombuffer(bytes(mixed), np.uint8), at, sizes, "uint16", source="shard")
    with pytest.raises(ValueError, match="shorter than the 18-byte header"):
        wds.decode_headers(u8, at, np.array([17, 5, 5]), "uint16", source="shard")
