from __future__ import annotations

import pyarrow as pa
import pytest

from bertstream.schemas import tasks as T
from bertstream.schemas.version import SchemaError


@pytest.mark.parametrize("layout", list(T.LAYOUTS.values()), ids=list(T.LAYOUTS))
def test_every_layout_round_trips_through_check_schema(layout):
    schema = T.arrow_schema(layout, "some_kind", "int32", "ab" * 32, {"max_seq_length": 128}, ["x", "y"])
    assert T.check_schema(schema, "some_kind", layout) == "int32"
    meta = T.read_metadata(schema)
    assert (
        meta["kind"] == "some_kind" and meta["labels"] == ["x", "y"] and meta["parameters"] == {"max_seq_length": 128}
    )
    assert tuple(schema.names) == layout.field_names()
    with pytest.raises(SchemaError, match="holds"):
        T.check_schema(schema, "other_kind", layout)
    for other in T.LAYOUTS.values():
        if other is not layout:
            with pytest.raises(SchemaError, match="differ"):
                T.check_schema(schema, "some_kind", other)


def test_the_kinds_of_then_keep_their_layouts_and_their_schemas():
    """Datasets written before the manifest recorded ``task.layout`` (every shard the pins hold): each kind's
    layout is the schema it was written with, field for field."""
    assert {k: x.name for k, x in T.EARLIER_LAYOUTS.items()} == {
        "classification": "sequence_class",
        "regression": "sequence_value",
        "ner": "token_labels",
        "squad": "spans",
    }
    assert T.layout_of("ner", {}) is T.TOKEN_LABELS and T.layout_of("ner", {"layout": "token_labels"}) is T.TOKEN_LABELS
    assert T.layout_of("multiple_choice", {"layout": "choices"}) is T.CHOICES
    assert T.CHOICES.sequences == T.SEQUENCE_LENGTHS and T.SEQUENCE_CLASS.sequences is None
    with pytest.raises(SchemaError, match="not a fine-tuning task's"):
        T.layout_of("multiple_choice", {})  # a kind added since records its layout
    with pytest.raises(SchemaError, match="task.layout must be one of"):
        T.layout_of("ner", {"layout": "trees"})


def test_foreign_or_altered_schemas_are_refused():
    schema = T.arrow_schema(T.TOKEN_LABELS, T.NER, "uint16")
    with pytest.raises(SchemaError, match="differ"):
        T.check_schema(schema.remove(schema.get_field_index(T.OWNED)), T.NER, T.TOKEN_LABELS)
    with pytest.raises(SchemaError, match="differ"):
        T.check_schema(
            schema.set(schema.get_field_index(T.LABELS), pa.field(T.LABELS, pa.list_(pa.int32()), False)),
            T.NER,
            T.TOKEN_LABELS,
        )
    with pytest.raises(SchemaError, match="not a bertstream shard"):
        T.check_schema(pa.schema([pa.field("input_ids", pa.list_(pa.uint16()))]), T.NER, T.TOKEN_LABELS)
    with pytest.raises(SchemaError, match="holds 'ner' rows, not 'summarization'"):
        T.check_schema(schema, "summarization", T.TOKEN_LABELS)


def test_row_ids_pack_file_record_and_window_and_sort_in_input_order():
    ids = [T.row_id(0, 2), T.row_id(0, 2, 1), T.row_id(0, 3), T.row_id(1, 1), T.row_id(65535, 2**32 - 1, 65535)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [T.split_row_id(i) for i in ids] == [(0, 2, 0), (0, 2, 1), (0, 3, 0), (1, 1, 0), (65535, 2**32 - 1, 65535)]
    with pytest.raises(SchemaError, match="out of range"):
        T.row_id(0, 1, 65536)
