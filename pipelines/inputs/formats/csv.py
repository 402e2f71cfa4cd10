"""``csv``: a table, one document per row. Comma-separated with quotes (a quoted field may span lines), or
tab-separated without quoting when the file's name ends ``.tsv`` (GLUE's and ChnSentiCorp's texts hold bare
quotes). The first row is the header; the text is the column ``--text-field`` names (default ``text``), split
into paragraphs at its newlines; ``id`` and ``title`` columns kept where present. A document's id is
``name:offset`` of its row's first line. A row with another number of fields than the header, or whose quote
never closes, is a counted drop; a header without the text column is refused, naming the file and its columns.
The rows are read by the reader every job shares (:mod:`bertstream.pipelines.inputs.delimited`)."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import COMPRESSED_SUFFIXES, InputError, Line
from bertstream.pipelines.inputs.delimited import TSV_ENDINGS, table_records
from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.documents import Document, text_paragraphs

ENDINGS = (".csv", *TSV_ENDINGS)  # --format auto takes a file named so as a table: its lines are no text
SPLITS = False  # a quoted field may span lines, and every row needs the header: one reader a file
anchor = None


def detect(sample: Sample) -> str | None:
    return None  # claimed by its name's ending (ENDINGS): commas in a sample are no evidence of a table


def parse(
    lines: Iterable[Line], name: str, counters: Counter, strip_gutenberg: bool = True, text_field: str = "text"
) -> Iterator[Document]:
    offsets: deque[int] = deque()  # of the lines read and not yet past: a record's first line is the oldest
    seen = 0  # lines taken off ``offsets``

    def texts() -> Iterator[str]:
        for offset, line in lines:
            offsets.append(offset)
            yield line

    header: list[str] | None = None
    for n, fields, _ in table_records(texts(), _delimited(name)):
        while seen < n - 1:
            offsets.popleft()
            seen += 1
        if fields is not None and not any(f.strip() for f in fields):
            continue  # a blank line
        if header is None:
            if fields is None or text_field not in fields:
                raise InputError(f"{name}: its header {fields} has no column {text_field!r}: give --text-field")
            header = fields
            continue
        if fields is None or len(fields) != len(header):
            counters[C.drop(C.UNBALANCED_QUOTE if fields is None else C.WRONG_COLUMN_COUNT)] += 1
            counters[C.DOCUMENTS_READ] += 1
            continue
        row = dict(zip(header, fields, strict=True))
        yield Document(
            f"{name}:{offsets[0]}",
            text_paragraphs(row[text_field], counters),
            title=row.get("title", ""),
            source_id=row.get("id", ""),
        )


def _delimited(name: str) -> str:
    base = name.lower()
    if base.endswith(COMPRESSED_SUFFIXES):
        base = base.rsplit(".", 1)[0]
    return "tsv" if base.endswith(TSV_ENDINGS) else "csv"
