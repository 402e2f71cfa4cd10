"""The one reader of delimited tables (CSV, TSV) every job shares: the task parsers' tables
(:mod:`bertstream.pipelines.tasks.classification.parse`) and the ``csv`` input format
(:mod:`bertstream.pipelines.inputs.formats.csv`).

TSV splits on tabs with no quoting (GLUE's texts hold bare quotes); CSV quotes, and a quoted field may span
lines. CSV is read strictly: a record whose quote never closes (or closes with text after it, ``"a"b``) is
no record (its fields None), and reading starts again at its next line, so one stray quote costs one row, not
every row up to the next quote.
"""

from __future__ import annotations

import csv
from collections import deque
from collections.abc import Iterable, Iterator

# A quoted CSV field may span lines, but not more than this many: a stray quote would swallow the file.
MAX_RECORD_LINES = 1000
TSV_ENDINGS = (".tsv",)  # a file named so is tab-separated; any other, comma-separated


def split_fields(line: str, delimited: str) -> list[str]:
    """The fields of one line of a ``tsv`` or ``csv`` table (a CSV record that spans lines: :func:`csv_records`)."""
    if delimited == "tsv":
        return line.split("\t")
    return next(csv.reader([line + "\n"]), [])


def csv_records(lines: Iterable[str]) -> Iterator[tuple[int, list[str] | None, int]]:
    """CSV records ``(first line, fields, lines spanned)``, lines numbered from 1; quoted fields may span lines.
    A record whose quote is unbalanced has ``fields`` None, and ``lines spanned`` counts the lines its quote
    had taken (reading goes on at the line after its first)."""
    source = iter(lines)
    pending: deque[str] = deque()
    first = 1

    def fill(k: int) -> bool:
        while len(pending) < k:
            line = next(source, None)
            if line is None:
                return False
            pending.append(line)
        return True

    def feed() -> Iterator[str]:
        i = 0
        while i < MAX_RECORD_LINES and fill(i + 1):
            i += 1
            yield pending[i - 1] + "\n"

    while fill(1):
        reader = csv.reader(feed(), strict=True)
        try:
            fields = next(reader)
        except csv.Error:
            yield first, None, reader.line_num
            pending.popleft()
            first += 1
            continue
        span = reader.line_num
        yield first, fields, span
        for _ in range(span):
            pending.popleft()
        first += span


def table_records(lines: Iterable[str], delimited: str) -> Iterator[tuple[int, list[str] | None, int]]:
    """The records of a ``tsv`` (a line each) or ``csv`` table as :func:`csv_records` gives them."""
    if delimited == "csv":
        yield from csv_records(lines)
        return
    for n, line in enumerate(lines, 1):
        yield n, split_fields(line, delimited), 1
