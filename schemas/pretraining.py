"""Pretraining instance layout, version 1: the Arrow schema and its metadata.

One row per instance, unpadded:

==================== ===================== ==================================================
field                type                  meaning
==================== ===================== ==================================================
input_ids            list<uint16|int32>    ``[CLS] A [SEP] B [SEP]`` after masking
segment_a_length     int16                 tokens of ``[CLS] A [SEP]``; token type 0 for these,
                                           1 for the rest
masked_lm_positions  list<uint16>          ascending positions that carry an MLM target
masked_lm_ids        list<uint16|int32>    original ids at those positions
next_sentence_label  int8                  0 IsNext, 1 NotNext (BERT / Hugging Face convention)
instance_id          uint64                stable id: same inputs, parameters and seed -> same id
==================== ===================== ==================================================

Ids are ``uint16`` when the vocabulary has at most 65,535 entries, else ``int32`` (``bertstream.schemas.id_types``).
Schema metadata (UTF-8 keys and values): ``bertstream.schema_version``, ``bertstream.kind``,
``bertstream.vocab_sha256`` and ``bertstream.parameters`` (JSON object).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from bertstream.schemas import id_types
from bertstream.schemas.version import SchemaError, check_version, decode_metadata, encode_metadata

KIND = "pretraining"
INPUT_IDS = "input_ids"
SEGMENT_A_LENGTH = "segment_a_length"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
NEXT_SENTENCE_LABEL = "next_sentence_label"
INSTANCE_ID = "instance_id"
FIELDS = (INPUT_IDS, SEGMENT_A_LENGTH, MASKED_LM_POSITIONS, MASKED_LM_IDS, NEXT_SENTENCE_LABEL, INSTANCE_ID)

IS_NEXT, NOT_NEXT = 0, 1
# masked_lm_positions: positions within a row (max_seq_length stays below 32,768).
POSITION_TYPE = pa.uint16()
POSITION_DTYPE = np.dtype("<u2")
# Positions every row leaves unmasked: [CLS] and the two [SEP]s.
SPECIALS_PER_ROW = 3


def arrow_schema(id_type: str, vocab_sha256: str = "", parameters: Mapping[str, Any] | None = None) -> pa.Schema:
    t = id_types.arrow_type(id_type)
    schema = pa.schema(
        [
            pa.field(INPUT_IDS, pa.list_(t), nullable=False),
            pa.field(SEGMENT_A_LENGTH, pa.int16(), nullable=False),
            pa.field(MASKED_LM_POSITIONS, pa.list_(POSITION_TYPE), nullable=False),
            pa.field(MASKED_LM_IDS, pa.list_(t), nullable=False),
            pa.field(NEXT_SENTENCE_LABEL, pa.int8(), nullable=False),
            pa.field(INSTANCE_ID, pa.uint64(), nullable=False),
        ]
    )
    return schema.with_metadata(encode_metadata(KIND, vocab_sha256, parameters))


def read_metadata(schema: pa.Schema) -> dict[str, Any]:
    """Version, kind, vocab hash and parameters from a shard's schema; raises on a foreign file."""
    return decode_metadata(schema.metadata)


def check_schema(schema: pa.Schema, *, source: str = "shard") -> str:
    """Validate a shard schema against version 1; return its id type."""
    meta = read_metadata(schema)
    check_version(meta["schema_version"], source=source)
    if meta["kind"] != KIND:
        raise SchemaError(f"{source}: holds {meta['kind']!r} rows, not {KIND!r}")
    names = tuple(schema.names)
    if names != FIELDS:
        raise SchemaError(f"{source}: fields {names} differ from {FIELDS}")
    value_type = schema.field(INPUT_IDS).type.value_type
    found = id_types.by_arrow(value_type)
    if found is None:
        raise SchemaError(f"{source}: input_ids has element type {value_type}")
    return found.name


def row_problem(
    lengths: np.ndarray,
    segment_a: np.ndarray,
    next_sentence: np.ndarray,
    masked: np.ndarray,
    max_seq_length: int | None,
) -> tuple[int, str] | None:
    """The first row of a shard (its index and what is wrong) whose fields no writer produces, or None.

    Each row is ``[CLS] A [SEP] B [SEP]``: at least 3 tokens and at most ``max_seq_length`` (the manifest's),
    ``segment_a_length`` covers ``[CLS] A [SEP]`` and leaves ``B [SEP]``, the NSP label is 0 or 1 and there are
    no more predictions than tokens. Readers range-check the ids per batch; these per shard, vectorised.
    """
    lengths = np.asarray(lengths, np.int64)
    segment_a = np.asarray(segment_a, np.int64)
    problems = (
        (lengths < SPECIALS_PER_ROW, lambda i: f"has {lengths[i]} tokens, fewer than [CLS] A [SEP] B [SEP]"),
        (
            lengths > (max_seq_length if max_seq_length is not None else np.iinfo(np.int64).max),
            lambda i: f"has {lengths[i]} tokens, more than the manifest's max_seq_length {max_seq_length}",
        ),
        (
            (segment_a < 2) | (segment_a > lengths - 1),
            lambda i: f"has segment_a_length {segment_a[i]} outside 2..{lengths[i] - 1} (its {lengths[i]} tokens)",
        ),
        (
            (next_sentence != IS_NEXT) & (next_sentence != NOT_NEXT),
            lambda i: f"has next_sentence_label {int(next_sentence[i])}, not {IS_NEXT} or {NOT_NEXT}",
        ),
        (np.asarray(masked) > lengths, lambda i: f"has {int(masked[i])} predictions for {lengths[i]} tokens"),
    )
    first: tuple[int, str] | None = None
    for bad, describe in problems:
        hits = np.flatnonzero(bad)
        if hits.size and (first is None or hits[0] < first[0]):
            first = (int(hits[0]), describe(int(hits[0])))
    return first
