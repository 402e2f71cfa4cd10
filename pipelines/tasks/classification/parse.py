"""TSV, CSV and JSONL tables -> ``TextRow`` records (classification and regression).

``parse_table`` reads one file with a resolved ``TableLayout``; ``check_table_layout`` checks the columns
before the pipeline starts; ``TableParser`` is the parser ``ReadRecords`` runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.counters import (
    EMPTY_TEXT,
    LABEL_NOT_A_VALUE,
    MALFORMED_JSON,
    MISSING_FIELD,
    MISSING_LABEL,
    TEXT_NOT_STRING,
    UNBALANCED_QUOTE,
    WRONG_COLUMN_COUNT,
    Tally,
    drop,
    reason,
)
from bertstream.pipelines.common.files import InputError, read_chunks
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.byte_ranges import iter_text_lines
from bertstream.pipelines.inputs.delimited import csv_records, split_fields
from bertstream.pipelines.tasks.read import file_lines, where
from bertstream.schemas import json_text

UNIT = "rows"  # the kind's unit (``KIND.unit``): what one record is, as the counters name it

# Regression's own drop reasons (a task row's, MISSING_LABEL, ...: bertstream.pipelines.common.counters)
BAD_REGRESSION_LABEL = reason("bad_regression_label", (UNIT,), "a regression label that is no finite number")
SCORE_OUT_OF_RANGE = reason("score_out_of_range", (UNIT,), "a regression score outside its preset's range")


@dataclass(slots=True)
class TextRow:
    """One classification/regression row: ``label`` is the raw label text (None when unlabeled)."""

    line: int
    text_a: str
    text_b: str | None
    label: str | None

    def size(self) -> int:
        return len(self.text_a) + len(self.text_b or "")

    def label_names(self) -> Iterable[str]:
        return () if self.label is None else (self.label,)


@dataclass(frozen=True, slots=True)
class TableLayout:
    """How to read a classification file: resolved column positions (JSON keys for jsonl)."""

    input_format: str  # tsv | csv | jsonl
    header: bool
    text: str
    pair: str | None
    label: str | None
    regression: bool = False
    score_range: tuple[float, float] | None = None  # a preset's scores (STS-B: 0..5); None: any finite number


def column_positions(layout: TableLayout, header: list[str] | None, path: str) -> dict[str, int]:
    """``{"text": i, "pair": j, "label": k}`` for the layout's columns; a missing column is a usage error."""
    flags = {"text": "text-column", "pair": "text-pair-column", "label": "label-column"}
    out = {}
    for role, flag in flags.items():
        col = getattr(layout, role)
        if col is None:
            continue
        if header is None:
            out[role] = int(col)
        elif header.count(col) > 1:
            # header.index took the first of them: which column the user meant cannot be known
            at = [i for i, name in enumerate(header) if name == col]
            raise UsageError(
                flag, f"{path}: the header names {col!r} {len(at)} times (columns {at}); rename all but one"
            )
        elif col in header:
            out[role] = header.index(col)
        else:
            raise UsageError(flag, f"{path}: no column {col!r}; the header has {header}")
    return out


def first_line(path: str, input_format: str) -> list[str] | dict | None:
    """Fields of the first non-blank line (the parsed object for jsonl), cleaned as the reader cleans it."""
    lines = iter_text_lines(read_chunks(path, 1 << 16), Tally().counts, limits.MAX_RECORD_BYTES, path)
    for line in islice(lines, 1000):
        if not line.strip():
            continue
        if input_format == "jsonl":
            try:
                obj = json_text.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError("input", f"{path}: first line is not JSON ({e})") from None
            return obj if isinstance(obj, dict) else None
        return split_fields(line, input_format)
    return None


def check_table_layout(path: str, layout: TableLayout) -> None:
    """Before the pipeline starts: the columns exist in ``path`` (first line), else a usage error naming the flag."""
    first = first_line(path, layout.input_format)
    if first is None:
        raise UsageError("input", f"{path}: holds no data line")
    if layout.input_format == "jsonl":
        flags = {"text": "text-column", "pair": "text-pair-column", "label": "label-column"}
        for role, flag in flags.items():
            col = getattr(layout, role)
            if col is not None and col not in first:
                raise UsageError(flag, f"{path}: first record has no field {col!r}; its fields are {sorted(first)}")
        return
    assert isinstance(first, list)  # a tsv/csv first line is its fields
    positions = column_positions(layout, first if layout.header else None, path)
    if not layout.header and max(positions.values()) >= len(first):
        flag = {"text": "text-column", "pair": "text-pair-column", "label": "label-column"}[
            max(positions, key=lambda role: positions[role])
        ]
        raise UsageError(
            flag, f"{path}: column index {max(positions.values())} but the first line has {len(first)} fields"
        )


def _row_values(fields: list[str], positions: dict[str, int]) -> tuple[str, str | None, str | None]:
    return (
        fields[positions["text"]],
        fields[positions["pair"]] if "pair" in positions else None,
        fields[positions["label"]] if "label" in positions else None,
    )


def _json_values(obj: Any, layout: TableLayout) -> tuple[Any, Any, Any] | None:
    if not isinstance(obj, dict):
        return None
    keys = [k for k in (layout.text, layout.pair, layout.label) if k is not None]
    if any(k not in obj for k in keys):
        return None
    return (
        obj[layout.text],
        obj.get(layout.pair) if layout.pair else None,
        obj.get(layout.label) if layout.label else None,
    )


def _label_text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else json.dumps(value)


def parse_table(
    lines: Iterable[str], path: str, file_index: int, layout: TableLayout, tally: Tally
) -> Iterator[TextRow]:
    """Rows of a TSV/CSV/JSONL file. Counts ``rows_read`` and drops by reason with their line numbers."""
    unit = UNIT
    positions: dict[str, int] | None = None
    expected = 0
    numbered: Iterable[tuple[int, Any]] = enumerate(lines, 1)
    if layout.input_format == "csv":
        numbered = _csv_rows(lines, path, file_index, tally)
    for n, line in numbered:
        if layout.input_format != "csv" and not line.strip():
            tally.add("blank_lines_skipped")
            continue
        if layout.input_format == "jsonl":
            tally.add(f"{unit}_read")
            try:
                obj = json_text.loads(line)
            except json.JSONDecodeError:
                tally.note(drop(MALFORMED_JSON, unit), file_index, n, where(path, n))
                continue
            values = _json_values(obj, layout)
            if values is None:
                tally.note(drop(MISSING_FIELD, unit), file_index, n, where(path, n))
                continue
            a, b, label = values
            if not isinstance(a, str) or (layout.pair and not isinstance(b, str)):
                tally.note(drop(TEXT_NOT_STRING, unit), file_index, n, where(path, n))
                continue
            if isinstance(label, (list, dict)):  # its JSON text would become a label name: '[1, 2]'
                tally.note(drop(LABEL_NOT_A_VALUE, unit), file_index, n, where(path, n))
                continue
            label = None if label is None else _label_text(label)
        else:
            fields = line if isinstance(line, list) else split_fields(line, layout.input_format)
            if not any(f.strip() for f in fields):
                tally.add("blank_lines_skipped")
                continue
            if positions is None:
                if layout.header:
                    positions, expected = column_positions(layout, fields, path), len(fields)
                    continue
                positions, expected = column_positions(layout, None, path), len(fields)
                if max(positions.values()) >= expected:
                    raise InputError(f"{where(path, n)}: {expected} fields, fewer than the columns asked for")
            tally.add(f"{unit}_read")
            if len(fields) != expected:
                tally.note(drop(WRONG_COLUMN_COUNT, unit), file_index, n, where(path, n))
                continue
            a, b, label = _row_values(fields, positions)
            label = None if label is None else label.strip()
        if not a.strip() or (layout.pair is not None and not b.strip()):
            tally.note(drop(EMPTY_TEXT, unit), file_index, n, where(path, n))
            continue
        if layout.label is not None:
            if not label:
                tally.note(drop(MISSING_LABEL, unit), file_index, n, where(path, n))
                continue
            if layout.regression and not _is_float(label):
                tally.note(drop(BAD_REGRESSION_LABEL, unit), file_index, n, where(path, n))
                continue
            if layout.score_range is not None and not layout.score_range[0] <= float(label) <= layout.score_range[1]:
                tally.note(drop(SCORE_OUT_OF_RANGE, unit), file_index, n, where(path, n))
                continue
        yield TextRow(n, a, b, label)


LINES_AFTER_BAD_QUOTE = "lines_reparsed_after_unbalanced_quote"


def _csv_rows(lines: Iterable[str], path: str, file_index: int, tally: Tally) -> Iterator[tuple[int, list[str]]]:
    """The records of ``csv_records``; those with an unbalanced quote are counted as read and dropped."""
    for n, fields, span in csv_records(lines):
        if fields is None:
            tally.add(f"{UNIT}_read")
            tally.note(drop(UNBALANCED_QUOTE, UNIT), file_index, n, where(path, n))
            tally.add(LINES_AFTER_BAD_QUOTE, span - 1)
            continue
        yield n, fields


def _is_float(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value == value and abs(value) != float("inf")


class TableParser:
    def __init__(self, layout: TableLayout) -> None:
        self.layout = layout

    def __call__(self, path: str, file_index: int, tally: Tally) -> Iterator[TextRow]:
        return parse_table(file_lines(path, tally), path, file_index, self.layout, tally)
