from __future__ import annotations

import pyarrow as pa
import pytest

from bertstream.schemas import tasks as T
from bertstream.schemas.version import SchemaError


@pytest.mark.parametrize("kind", T.KINDS)
def test_every_kind_round_trips_through_check_schema(kind):
    schema = T.arrow_schema(kind, "int32", "ab" * 32, {"max_seq_length": 128}, ["x", "y"])
    assert T.check_schema(schema, kind) == "int32"
    meta = T.read_metadata(schema)
    assert meta["kind"] == kind and meta["labels"] == ["x", "y"] and meta["parameters"] == {"max_seq_length": 128}
    assert tuple(schema.names) == T.field_names(kind)
    others = [k for k in T.KINDS if k != kind]
    with pytest.raises(SchemaError, match="holds"):
        T.check_schema(schema, others[0])


def test_foreign_or_altered_schemas_are_refused():
    schema = T.arrow_schema(T.NER, "uint16")
    with pytest.raises(SchemaError, match="differ"):
        T.check_schema(schema.remove(schema.get_field_index(T.OWNED)), T.NER)
    with pytest.raises(SchemaError, match="differ"):
        T.check_schema(
            schema.set(schema.get_field_index(T.LABELS), pa.field(T.LABELS, pa.list_(pa.int32()), False)), T.NER
        )
    with pytest.raises(SchemaError, match="not a bertstream shard"):
        T.check_schema(pa.schema([pa.field("input_ids", pa.list_(pa.uint16()))]), T.NER)
    with pytest.raises(SchemaError, match="kind"):
        T.check_schema(schema, "summarization")


def test_row_ids_pack_file_record_and_window_and_sort_in_input_order():
    ids = [T.row_id(0, 2), T.row_id(0, 2, 1), T.row_id(0, 3), T.row_id(1, 1), T.row_id(65535, 2**32 - 1, 65535)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [T.split_row_id(i) for i in ids] == [(0, 2, 0), (0, 2, 1), (0, 3, 0), (1, 1, 0), (65535, 2**32 - 1, 65535)]
    with pytest.raises(SchemaError, match="out of range"):
        T.row_id(0, 1, 65536)
