"""Fine-tuning task layouts, version 1: Arrow schemas, metadata and row ids of ``bertprep task`` datasets.

A task dataset is a folder with ``manifest.json`` (``bertstream.schemas.manifest``), ``vocab.txt`` and Arrow IPC files
``<kind>-00000-of-0000N.arrow`` listed in the manifest (plus ``examples.jsonl`` for SQuAD). Read the shards
in manifest order: rows are sorted by ``row_id`` within a shard and shards hold consecutive ranges of the
input, so the concatenation is the input order. Nothing is padded: list columns hold exactly the tokens.
Ids are ``uint16`` when the vocabulary has at most 65,535 entries, else ``int32`` (``bertstream.schemas.id_types``).

Layouts and kinds
-----------------
The contract defines row LAYOUTS (``LAYOUTS``: ``sequence_class``, ``sequence_value``, ``token_labels``,
``spans``, ``choices``), each an Arrow schema; a task KIND is a name (``bertprep task NAME``, the trainer's
``Task.kind``) whose rows fit one of them. The manifest records the layout (``task.layout``) beside the kind, and
both sides check a dataset's shards against it: a new kind whose rows fit a layout here needs no edit of this
module. Datasets written before the manifest recorded it hold one of the four kinds of then, whose layout the
kind names (``EARLIER_LAYOUTS``: classification -> sequence_class, regression -> sequence_value, ner ->
token_labels, squad -> spans); the tables below name the layouts by those kinds.

Row ids (every kind)
--------------------
``row_id`` (uint64) = ``file_index << 48 | record << 16 | window``:

- ``file_index``: index into the manifest's ``inputs`` (sorted paths);
- ``record``: the 1-based line where the row or sentence starts (classification, NER), or the 0-based
  ordinal of the question in its file counting every article (SQuAD), so ids do not depend on ``--articles``;
- ``window``: 0 for classification; the window of a long sentence or context (NER, SQuAD).

Same inputs and parameters -> same ids. :func:`split_row_id` decodes one.

``classification`` and ``regression`` (one row per text or text pair)
-----------------------------------------------------------------------
==================== ===================== ==================================================================
field                type                  meaning
==================== ===================== ==================================================================
row_id               uint64                see above
input_ids            list<uint16|int32>    ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``; pairs truncated
                                           longest-first (a tie trims B), as BERT's ``truncate_seq_pair``
segment_a_length     int16                 tokens of ``[CLS] A [SEP]``: token type 0 for these, 1 for the
                                           rest (equals ``len(input_ids)`` for single texts)
label                int16 (classification) index into ``manifest.task["labels"]``; null when the split is
                     float32 (regression)  unlabeled (``manifest.task["labeled"]`` is false, e.g. GLUE test)
==================== ===================== ==================================================================

``ner`` (one row per window of a sentence; most sentences have one window)
--------------------------------------------------------------------------
==================== ===================== ==================================================================
row_id               uint64                see above (window in the low 16 bits)
window               uint16                window index within the sentence
input_ids            list<uint16|int32>    ``[CLS] sub-tokens of the window's words [SEP]``
labels               list<int16>           tag id on the FIRST sub-token of every word of the window;
                                           ``IGNORE_INDEX`` (-100) on other sub-tokens and on the specials
word_ids             list<int32>           per token, the index of its word in the whole sentence; -1 on
                                           ``[CLS]``/``[SEP]``
owned                list<int8>            per token, 1 when this window OWNS the token's word, else 0 (0 on
                                           specials). Windows overlap by ``--window-overlap`` words; every
                                           word is owned by exactly one window (the overlap is split at its
                                           middle), so "labels != -100 and owned == 1" selects each word of
                                           the sentence exactly once, in order
num_words            int32                 words in the whole sentence
==================== ===================== ==================================================================

``squad`` (one row per window of a question's context; ``examples.jsonl`` holds the examples)
-----------------------------------------------------------------------------------------------
==================== ===================== ==================================================================
row_id               uint64                see above (window in the low 16 bits)
example_index        int32                 0-based line of the example in ``examples.jsonl``
example_id           string                the SQuAD question id (what the official metric keys on)
window               uint16                window index within the example
input_ids            list<uint16|int32>    ``[CLS] question [SEP] context window [SEP]``
segment_a_length     int16                 tokens of ``[CLS] question [SEP]`` (token type 0), rest type 1
offset_start         list<int32>           per token, start character of the token in the example's context;
                                           -1 on question tokens and specials
offset_end           list<int32>           per token, end character (exclusive); -1 likewise. The text of a
                                           span ``i..j`` is ``context[offset_start[i]:offset_end[j]]``
max_context          list<int8>            1 where this window is the token's maximal-context window
                                           (BERT's rule; ties go to the earlier window), else 0
start_position       int32                 answer start token in ``input_ids``; 0 (``[CLS]``) when the
                                           question is impossible or the answer is not inside this window
end_position         int32                 answer end token (inclusive); 0 likewise
is_impossible        bool                  SQuAD v2.0 unanswerable question
==================== ===================== ==================================================================

``choices`` (one row per question: several sequences, its candidates, one after another)
-------------------------------------------------------------------------------------------
==================== ===================== ==================================================================
row_id               uint64                see above
input_ids            list<uint16|int32>    the candidates' ``[CLS] A [SEP] B_i [SEP]``, one after another
sequence_lengths     list<int16>           tokens of each candidate's sequence (they add up to
                                           ``len(input_ids)``); a row's sequences are read in this order
segment_a_lengths    list<int16>           per candidate, tokens of ``[CLS] A [SEP]`` (token type 0)
label                int16                 index of the right candidate; null when the split is unlabeled
==================== ===================== ==================================================================

``examples.jsonl`` (SQuAD; path, bytes, sha256 and count in ``manifest.task["files"]``): one JSON object per
line, line ``i`` is ``example_index`` ``i``: ``{"example_index", "id", "title", "context", "question",
"answers": {"text": [...], "answer_start": [...]}, "is_impossible", "answer_span": [start, end] | null}``.
``answers`` are ALL the answers of the input, as given (the official metric compares against every one);
``answer_span`` is the character span the positions were computed from (after offset repair), null when none.

Schema metadata (UTF-8 keys and values): ``bertstream.schema_version``, ``bertstream.kind``,
``bertstream.vocab_sha256``, ``bertstream.parameters`` (JSON object) and ``bertstream.labels`` (JSON list of
label names, index = id; empty for regression and SQuAD).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from bertstream.schemas import id_types
from bertstream.schemas.version import SchemaError, check_version, decode_metadata, encode_metadata

CLASSIFICATION, REGRESSION, NER, SQUAD = "classification", "regression", "ner", "squad"
_KIND_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

ROW_ID = "row_id"
INPUT_IDS = "input_ids"
SEGMENT_A_LENGTH = "segment_a_length"
SEQUENCE_LENGTHS = "sequence_lengths"
SEGMENT_A_LENGTHS = "segment_a_lengths"
LABEL = "label"
LABELS = "labels"
WINDOW = "window"
# The window column: a window's index within its sentence or example.
WINDOW_TYPE = pa.uint16()
WINDOW_DTYPE = np.dtype("<u2")
WORD_IDS = "word_ids"
OWNED = "owned"
NUM_WORDS = "num_words"
EXAMPLE_INDEX = "example_index"
EXAMPLE_ID = "example_id"
OFFSET_START = "offset_start"
OFFSET_END = "offset_end"
MAX_CONTEXT = "max_context"
START_POSITION = "start_position"
END_POSITION = "end_position"
IS_IMPOSSIBLE = "is_impossible"

IGNORE_INDEX = -100  # NER label on tokens that carry no tag (PyTorch cross_entropy's default ignore_index)
NO_OFFSET = -1  # SQuAD offsets of question and special tokens; NER word id of specials
EXAMPLES_FILE = "examples.jsonl"

FILE_BITS, RECORD_BITS, WINDOW_BITS = 16, 32, 16
MAX_FILES, MAX_RECORD, MAX_WINDOWS = 1 << FILE_BITS, 1 << RECORD_BITS, 1 << WINDOW_BITS


def row_id(file_index: int, record: int, window: int = 0) -> int:
    if not (0 <= file_index < MAX_FILES and 0 <= record < MAX_RECORD and 0 <= window < MAX_WINDOWS):
        raise SchemaError(f"row id parts out of range: file {file_index}, record {record}, window {window}")
    return (file_index << (RECORD_BITS + WINDOW_BITS)) | (record << WINDOW_BITS) | window


def split_row_id(rid: int) -> tuple[int, int, int]:
    """``(file_index, record, window)`` of a row id."""
    rid = int(rid)
    return rid >> (RECORD_BITS + WINDOW_BITS), (rid >> WINDOW_BITS) & (MAX_RECORD - 1), rid & (MAX_WINDOWS - 1)


_IDS = None  # a column type: a list of the vocabulary's ids (uint16 or int32, ``id_types``)


@dataclass(frozen=True, slots=True)
class RowLayout:
    """A row layout of the contract: its name (what a manifest records as ``task.layout``), what a row is, its
    columns in order as ``(name, arrow type, nullable)`` (type ``_IDS``: ``list<uint16|int32>``), and
    ``sequences``: the column of each row's sequence lengths where a row holds several, None where a row is one
    sequence. A kind picks the layout its rows fit; the kind's name is its own (``bertprep task NAME``, the
    trainer's ``Task.kind``), not the contract's."""

    name: str
    what: str
    columns: tuple[tuple[str, Any, bool], ...]
    sequences: str | None = None

    def fields(self, ids: pa.DataType) -> list[pa.Field]:
        return [pa.field(n, pa.list_(ids) if t is _IDS else t, nullable=null) for n, t, null in self.columns]

    def field_names(self) -> tuple[str, ...]:
        return tuple(n for n, _, _ in self.columns)


def _sequence(label: pa.DataType) -> tuple[tuple[str, Any, bool], ...]:
    return (
        (ROW_ID, pa.uint64(), False),
        (INPUT_IDS, _IDS, False),
        (SEGMENT_A_LENGTH, pa.int16(), False),
        (LABEL, label, True),
    )


SEQUENCE_CLASS = RowLayout("sequence_class", "one sequence or pair per row and a class id", _sequence(pa.int16()))
SEQUENCE_VALUE = RowLayout("sequence_value", "one sequence or pair per row and a value", _sequence(pa.float32()))
TOKEN_LABELS = RowLayout(
    "token_labels",
    "a window of a sentence per row and a tag id per token",
    (
        (ROW_ID, pa.uint64(), False),
        (WINDOW, WINDOW_TYPE, False),
        (INPUT_IDS, _IDS, False),
        (LABELS, pa.list_(pa.int16()), False),
        (WORD_IDS, pa.list_(pa.int32()), False),
        (OWNED, pa.list_(pa.int8()), False),
        (NUM_WORDS, pa.int32(), False),
    ),
)
SPANS = RowLayout(
    "spans",
    "a window of a question's context per row and the answer's start and end tokens",
    (
        (ROW_ID, pa.uint64(), False),
        (EXAMPLE_INDEX, pa.int32(), False),
        (EXAMPLE_ID, pa.string(), False),
        (WINDOW, WINDOW_TYPE, False),
        (INPUT_IDS, _IDS, False),
        (SEGMENT_A_LENGTH, pa.int16(), False),
        (OFFSET_START, pa.list_(pa.int32()), False),
        (OFFSET_END, pa.list_(pa.int32()), False),
        (MAX_CONTEXT, pa.list_(pa.int8()), False),
        (START_POSITION, pa.int32(), False),
        (END_POSITION, pa.int32(), False),
        (IS_IMPOSSIBLE, pa.bool_(), False),
    ),
)
CHOICES = RowLayout(
    "choices",
    "several sequences per row (a question's candidates) and the index of the right one",
    (
        (ROW_ID, pa.uint64(), False),
        (INPUT_IDS, _IDS, False),
        (SEQUENCE_LENGTHS, pa.list_(pa.int16()), False),
        (SEGMENT_A_LENGTHS, pa.list_(pa.int16()), False),
        (LABEL, pa.int16(), True),
    ),
    sequences=SEQUENCE_LENGTHS,
)
LAYOUTS: dict[str, RowLayout] = {x.name: x for x in (SEQUENCE_CLASS, SEQUENCE_VALUE, TOKEN_LABELS, SPANS, CHOICES)}
# Datasets written before their manifest recorded ``task.layout`` hold one of the four kinds of then: the kind
# names the layout. A kind added since records its layout (``layout_of``); none is added here.
EARLIER_LAYOUTS: dict[str, RowLayout] = {
    CLASSIFICATION: SEQUENCE_CLASS,
    REGRESSION: SEQUENCE_VALUE,
    NER: TOKEN_LABELS,
    SQUAD: SPANS,
}


def check_kind_name(kind: Any, *, source: str = "kind") -> str:
    """A task kind's name (a shard file's prefix and a command's name): lower-case letters, digits and ``_``."""
    if not is_kind_name(kind):
        raise SchemaError(f"{source}: a task kind is a lower-case name like ner or multiple_choice, got {kind!r}")
    return kind


def is_kind_name(kind: Any) -> bool:
    return isinstance(kind, str) and bool(_KIND_NAME.match(kind))


def layout_of(kind: str, task: Mapping[str, Any], *, source: str = "manifest") -> RowLayout:
    """The layout of a task dataset's rows: the one its manifest records (``task.layout``), or, for a dataset
    written before manifests recorded it, the one its kind had then."""
    recorded = task.get("layout")
    if recorded is None:
        if kind in EARLIER_LAYOUTS:
            return EARLIER_LAYOUTS[kind]
        raise SchemaError(
            f"{source}: a {kind!r} dataset, not a fine-tuning task's (no task.layout; bertprep task writes it)"
        )
    if recorded not in LAYOUTS:
        raise SchemaError(f"{source}: task.layout must be one of {sorted(LAYOUTS)}, got {recorded!r}")
    return LAYOUTS[recorded]


def arrow_schema(
    layout: RowLayout,
    kind: str,
    id_type: str,
    vocab_sha256: str = "",
    parameters: Mapping[str, Any] | None = None,
    labels: Sequence[str] = (),
) -> pa.Schema:
    schema = pa.schema(layout.fields(id_types.arrow_type(id_type)))
    return schema.with_metadata(encode_metadata(kind, vocab_sha256, parameters, {"labels": list(labels)}))


def read_metadata(schema: pa.Schema) -> dict[str, Any]:
    """Version, kind, vocab hash, parameters and label names of a task shard; raises on a foreign file."""
    return decode_metadata(schema.metadata, {"labels": []})


def check_schema(schema: pa.Schema, kind: str, layout: RowLayout, *, source: str = "shard") -> str:
    """Validate a task shard's schema against version 1, ``kind`` and its ``layout``; return its id type."""
    meta = read_metadata(schema)
    check_version(meta["schema_version"], source=source)
    if meta["kind"] != kind:
        raise SchemaError(f"{source}: holds {meta['kind']!r} rows, not {kind!r}")
    value_type = schema.field(INPUT_IDS).type.value_type if INPUT_IDS in schema.names else None
    found = id_types.by_arrow(value_type) if value_type is not None else None
    if found is not None:
        expected = pa.schema(layout.fields(found.arrow))
        if not schema.remove_metadata().equals(expected):
            raise SchemaError(
                f"{source}: fields {schema.remove_metadata()} differ from layout {layout.name}'s {expected}"
            )
        return found.name
    raise SchemaError(f"{source}: input_ids has element type {value_type}, not uint16 or int32")
