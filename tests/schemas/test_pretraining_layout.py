from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from schemas import pretraining as P
from schemas import wds
from schemas.manifest import Manifest, ShardInfo, shard_name
from schemas.version import SchemaError


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


def test_manifest_round_trip_and_version_check():
    shard = ShardInfo(shard_name("pretrain", 3, 8, "arrow"), "arrow", 10, 100, "0" * 64)
    assert shard.path == "pretrain-00003-of-00008.arrow"
    m = Manifest(
        kind="pretraining",
        vocab={"sha256": "x", "size": 5, "id_type": "uint16", "special_ids": {}},
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
