"""Parquet and Arrow inputs (``parquet:``, ``arrow:``; their modules in ``formats/``): the records of a table, read
column by column, in units that split across workers.

A record is ``(row, id, title, text)``: its row number in the file (what document ids are made of), the values of
the ``id`` and ``title`` columns where the table has them (``""`` where not, or null), and the text column's value
(``None`` when null: the caller counts it as a drop). Only these columns are read.

- Parquet: the units are row groups, read with the file's footer; only the wanted column chunks are fetched, a
  page at a time, in batches sized from the footer to hold at most the cap (``MAX_RECORD_BYTES``).
- Arrow: the units are record batches, of an Arrow IPC *stream* (what ``datasets.Dataset.save_to_disk`` writes:
  ``data-00000-of-00003.arrow``) or an IPC *file* (``ARROW1`` magic: a stream with a footer), counted and sized
  from the messages' metadata (:mod:`~bertstream.pipelines.inputs.arrow_messages`) before a body is read. Local
  files are memory-mapped, so the columns not read are never loaded. A stream with dictionary batches is one unit.

Memory is bounded by the cap, not by the writer's batches: rows become Python values a slice within the cap at a
time, and a row, a row group or a batch that cannot be read within it is refused in one line naming it.

:func:`table_ranges` tiles a file with byte ranges ``[start, end)`` of whole units (each ``range_bytes`` or
more, the first from byte 0, the last to the file's end), each with its first row; :func:`read_table` reads the
records of the units that start inside a range. The ranges' records are exactly the whole file's, in order.
A missing or non-text column, a corrupt footer, a file that is no table: ``InputError`` naming the file.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import literal
from bertstream.pipelines.common.files import InputError, record_too_big
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.arrow_messages import DICTIONARY, RECORD_BATCH, Head, heads
from bertstream.pipelines.inputs.documents import Document, text_paragraphs
from bertstream.pipelines.inputs.parquet_batches import BUFFER_BYTES, batch_rows, check_column_metadata
from bertstream.schemas import json_text
from bertstream.schemas.fields import local_member
from bertstream.schemas.version import SchemaError

ID_COLUMN = "id"
TITLE_COLUMN = "title"
_FILE_MAGIC = b"ARROW1"

Record = tuple[int, str, str, str | None]  # (row in the file, id, title, text)


def table_ranges(path: str, fmt: str, range_bytes: int, text_field: str) -> list[tuple[int, int, int]]:
    """``[(start, end, first_row)]``: whole units of about ``range_bytes`` that tile the file (one range when
    ``range_bytes`` is 0). Checks the text column, so a bad file fails before any of it is read."""
    with _opened(path, fmt) as source, _refused(path, fmt):
        if fmt == "parquet":
            units, size = _parquet_units(source, path, text_field)
        else:
            units, size = _arrow_units(source, path, text_field)
    return _group(units, size, range_bytes)


def read_table(
    path: str, fmt: str, text_field: str, start: int = 0, end: int | None = None, row: int = 0
) -> Iterator[Record]:
    """The records of the units that start in ``[start, end)`` (``end`` None: to the file's end), numbered from
    ``row`` (the range's first row, from :func:`table_ranges`). A row past the cap (``MAX_RECORD_BYTES``) is
    refused, naming it; so is a Parquet row group or an Arrow batch that cannot be read within the cap."""
    with _opened(path, fmt) as source, _refused(path, fmt):
        if fmt == "parquet":
            yield from _parquet_records(source, path, text_field, start, end, row)
        else:
            yield from _arrow_records(source, path, text_field, start, end, row)


@contextmanager
def _refused(path: str, fmt: str) -> Iterator[None]:
    """pyarrow's errors reading a corrupt file as one ``InputError`` naming it (text or column names that are no
    UTF-8 too: the fuzz found a schema's names so)."""
    try:
        yield
    except InputError:
        raise
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {_what(fmt)} ({_why(e)})") from e


@dataclass(frozen=True, slots=True)
class Table:
    """A table format (``parquet`` or ``arrow``) as the read stage calls a format of records (``formats/``)."""

    fmt: str

    def ranges(self, path: str, size: int, range_bytes: int, text_field: str) -> list[tuple[int, int, int]]:
        return table_ranges(path, self.fmt, range_bytes, text_field)

    def read(
        self, path: str, name: str, counters: Counter, text_field: str, start: int, end: int | None, row: int
    ) -> Iterator[Document]:
        """The documents of the records of ``[start, end)`` (:func:`read_table`), ids ``name:row``; a null text is
        a counted drop. ``bytes_read`` counts the bytes of the file as stored that the range covers, so that a
        file's ranges add up to its size (``documents_read`` of the documents yielded is the caller's). A text
        past ``MAX_RECORD_BYTES`` is refused, named (:func:`read_table`)."""
        for r, source_id, title, text in read_table(path, self.fmt, text_field, start, end, row):
            if text is None:
                counters[C.drop(C.MISSING_TEXT)] += 1
                counters[C.DOCUMENTS_READ] += 1
                continue
            yield Document(f"{name}:{r}", text_paragraphs(text, counters), title=title, source_id=source_id)
        counters[C.BYTES_READ] += (_stored_size(path) if end is None else end) - start


def _stored_size(path: str) -> int:
    if "://" in path:
        found = literal.metadata(path)  # a file listed already: its name is not a pattern
        return found.size_in_bytes if found else 0
    return os.path.getsize(path)


def datasets_folder_files(folder: str) -> list[str]:
    """The Arrow files of a ``datasets.Dataset.save_to_disk`` folder, in its order (``state.json``: each name a
    regular file inside the folder, else refused), else the folder's ``*.arrow`` files, sorted. A ``DatasetDict``
    folder is refused, naming its splits."""
    state = os.path.join(folder, "state.json")
    splits = os.path.join(folder, "dataset_dict.json")
    if os.path.isfile(state):
        try:
            with open(state, encoding="utf-8") as f:
                files = [d["filename"] for d in json_text.loads(f.read())["_data_files"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError("input", f"{state}: not a datasets state.json ({_why(e)})") from None
        return [_member(folder, n, state) for n in files]
    if os.path.isfile(splits):
        try:
            with open(splits, encoding="utf-8") as f:
                names = list(json_text.loads(f.read())["splits"])
        except (OSError, ValueError, KeyError, TypeError):
            names = sorted(n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n)))
        first = os.path.join(folder, names[0]) if names else folder + "/SPLIT"
        raise UsageError(
            "input",
            f"{folder} is a DatasetDict folder (splits: {', '.join(names)}): give one split, e.g. arrow:{first}",
        )
    found = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".arrow"))
    if not found:
        raise UsageError("input", f"{folder} is a folder without .arrow files (nor a datasets save_to_disk folder)")
    return found


# --------------------------------------------------------------------------------------------- internals


def _member(folder: str, name: Any, state: str) -> str:
    """A file that ``state.json`` names, as the manifests' shards are taken: a relative name inside the folder, no
    link out of it, a regular file that is there; anything else is refused before a byte of it is read."""
    try:
        path = local_member(folder, name, state)
    except SchemaError as e:
        why = str(e).removeprefix(f"{state}: ").replace("dataset folder", "folder")
        raise UsageError("input", f"{state}: {why if str(name) in why else f'{name!r}: {why}'}") from None
    if not os.path.isfile(path):
        raise UsageError("input", f"{state}: {name!r} is missing from {folder}")
    return path


def _why(e: BaseException) -> str:
    """An exception in one line (pyarrow's messages span several)."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def _what(fmt: str) -> str:
    return "not a readable Parquet file" if fmt == "parquet" else "not a readable Arrow IPC file or stream"


@contextmanager
def _opened(path: str, fmt: str) -> Iterator[Any]:
    """A local file memory-mapped (Arrow) or by path (Parquet), a URL through Beam's filesystems."""
    try:
        if "://" in path:
            raw = FileSystems.open(path, compression_type="uncompressed")
            source: Any = pa.PythonFile(raw, mode="r")
        else:
            source = pa.memory_map(path) if fmt == "arrow" else path
    except Exception as e:
        raise InputError(f"cannot read {path}: {_why(e)}") from e
    try:
        yield source
    finally:
        if not isinstance(source, str):
            source.close()


def _text_columns(schema: pa.Schema, path: str, text_field: str) -> list[str]:
    """The columns to read: the text column (checked: it exists and holds text), then ``id`` and ``title``
    where the table has them."""
    names = schema.names
    if text_field not in names:
        raise InputError(
            f"{path} has no column {text_field!r} (its columns: {', '.join(names) or 'none'}): "
            "name the text column with --text-field"
        )
    kind = schema.field(text_field).type
    value = kind.value_type if pa.types.is_dictionary(kind) else kind
    if not (pa.types.is_string(value) or pa.types.is_large_string(value) or pa.types.is_string_view(value)):
        raise InputError(
            f"{path}: column {text_field!r} holds {kind}, not text: name the text column with --text-field"
        )
    return [text_field] + [c for c in (ID_COLUMN, TITLE_COLUMN) if c in names and c != text_field]


def _records(batch: pa.RecordBatch, columns: list[str], row: int, path: str) -> Iterator[Record]:
    """The records of ``batch``, its rows turned into Python values a slice at a time: the slice's values of the
    columns read hold at most the cap (``MAX_RECORD_BYTES``) of bytes, or it is one row. A row whose text (its
    UTF-8 bytes; a dictionary's value for each row that takes it), or its id and title, hold more is refused
    before it is turned."""
    # The columns read are checked whole first (offsets in bounds, text UTF-8): an Arrow file's batches are mapped
    # as they are stored, and a corrupt offset read as it is crashed the process (found by the fuzz test).
    batch = batch.select(columns)
    batch.validate(full=True)
    cap = limits.MAX_RECORD_BYTES
    if batch.nbytes <= cap and not any(pa.types.is_dictionary(f.type) for f in batch.schema):
        slices: Iterator[tuple[int, int]] = iter([(0, batch.num_rows)])  # (no row can hold more than the whole)
        texts = sizes = np.zeros(batch.num_rows, dtype=np.int64)
    else:
        texts = _value_bytes(batch.column(0))
        sizes = texts + sum((_value_bytes(batch.column(c)) for c in columns[1:]), np.zeros_like(texts))
        slices = _slices(sizes, cap)
    for a, b in slices:
        if texts[a] > cap or sizes[a] - texts[a] > cap:  # (then alone in its slice)
            what = repr(columns[0]) if texts[a] > cap else ", ".join(repr(c) for c in columns[1:])
            raise record_too_big(path, f"row {row + a}'s {what}", cap)
        part = batch.slice(a, b - a)
        text = part.column(0).to_pylist()
        n = b - a
        ids = part.column(ID_COLUMN).to_pylist() if ID_COLUMN in columns else [None] * n
        titles = part.column(TITLE_COLUMN).to_pylist() if TITLE_COLUMN in columns else [None] * n
        for k in range(n):
            i, t = ids[k], titles[k]
            yield row + a + k, "" if i is None else str(i), "" if t is None else str(t), text[k]


def _value_bytes(column: pa.Array) -> np.ndarray:
    """``[rows]`` int64: the bytes of each row's value, text or binary as it is stored (a dictionary column: its
    value's), any other type its column's bytes spread evenly."""
    n = len(column)
    kind = column.type
    values, take = (column.dictionary, column.indices) if pa.types.is_dictionary(kind) else (column, None)
    try:
        lengths = pc.binary_length(values).fill_null(0).cast(pa.int64())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # (not text nor binary)
        return np.full(n, -(-column.nbytes // max(n, 1)), dtype=np.int64)
    if take is not None:
        lengths = pc.take(lengths, take).fill_null(0)
    return lengths.to_numpy(zero_copy_only=False).astype(np.int64)


def _slices(sizes: np.ndarray, budget: int) -> Iterator[tuple[int, int]]:
    """``[a, b)`` in order tiling the rows: each as many rows as hold at most ``budget`` in all, at least one."""
    total = np.cumsum(sizes)
    a = 0
    while a < len(sizes):
        before = int(total[a - 1]) if a else 0
        b = max(a + 1, int(np.searchsorted(total, before + budget, side="right")))
        yield a, b
        a = b


def _group(units: list[tuple[int, int]], size: int, range_bytes: int) -> list[tuple[int, int, int]]:
    """Units ``(first byte, rows)`` in file order -> ranges of about ``range_bytes`` tiling ``[0, size)``."""
    if len(units) < 2 or range_bytes <= 0:
        return [(0, size, 0)]
    ranges: list[tuple[int, int, int]] = []
    start, first_row, row = 0, 0, 0
    for (_, rows), nxt in zip(units, [u[0] for u in units[1:]] + [size]):
        row += rows
        if nxt - start >= range_bytes and nxt < size:
            ranges.append((start, nxt, first_row))
            start, first_row = nxt, row
    ranges.append((start, size, first_row))
    return ranges


# --- Parquet


def _parquet_file(source: Any, path: str) -> pq.ParquetFile:
    """The file with its footer read. Its pages are read through a buffer (``buffer_size``), not a column chunk at
    once (pyarrow's default, and ``pre_buffer``'s), so that memory holds a page, not a row group."""
    try:
        return pq.ParquetFile(source, buffer_size=BUFFER_BYTES, pre_buffer=False)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"cannot read {path}: {_what('parquet')} ({_why(e)})") from e


def _row_group_start(meta: pq.RowGroupMetaData) -> int:
    starts = []
    for j in range(meta.num_columns):
        c = meta.column(j)
        starts.append(c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset)
    return min(starts)


def _parquet_units(source: Any, path: str, text_field: str) -> tuple[list[tuple[int, int]], int]:
    pf = _parquet_file(source, path)
    _text_columns(pf.schema_arrow, path, text_field)
    check_column_metadata(pf, path, source)  # where the row groups are listed, once per file: before the first column()
    return _row_groups(pf), _size(source)


def _row_groups(pf: pq.ParquetFile) -> list[tuple[int, int]]:
    """``(first byte, rows)`` of each row group; one unit for all when they are not in file order."""
    meta = pf.metadata
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    units = [(0 if i == 0 else _row_group_start(g), g.num_rows) for i, g in enumerate(groups)]
    if any(b[0] <= a[0] for a, b in zip(units, units[1:])):
        return [(0, sum(g.num_rows for g in groups))]
    return units


def _parquet_records(
    source: Any, path: str, text_field: str, start: int, end: int | None, row: int
) -> Iterator[Record]:
    pf = _parquet_file(source, path)
    columns = _text_columns(pf.schema_arrow, path, text_field)
    units = _row_groups(pf)
    stop = end if end is not None else float("inf")
    if len(units) == pf.metadata.num_row_groups:
        chosen = [i for i, (offset, _) in enumerate(units) if start <= offset < stop]
    else:  # out of file order: the file is one range
        chosen = list(range(pf.metadata.num_row_groups)) if start == 0 else []
    for i in chosen:
        rows = batch_rows(pf, source, i, columns, path)
        for batch in pf.iter_batches(batch_size=rows, row_groups=[i], columns=columns):
            yield from _records(batch, columns, row, path)
            row += batch.num_rows


def _size(source: Any) -> int:
    if isinstance(source, str):
        return os.path.getsize(source)
    return source.size()


# --- Arrow


def _arrow_heads(source: Any, start: int, path: str) -> Iterator[Head]:
    """The messages from ``start``, each sized from its metadata before pyarrow reads it: a batch whose body would
    be held in memory past the cap is refused, naming its byte. A local file is memory-mapped, so its bodies are
    never copied (what :func:`_records` converts is bounded there); a URL's bodies are read, and compressed
    buffers are unpacked, whole."""
    cap = limits.MAX_RECORD_BYTES
    mapped = isinstance(source, pa.MemoryMappedFile)
    for head in heads(source, start, source.size(), path):
        if (head.compressed or not mapped) and head.unpacked > cap:
            raise record_too_big(path, f"the batch at byte {head.offset}", cap)
        yield head


def _arrow_head(source: Any, path: str, text_field: str) -> tuple[pa.Schema, int, int, list[str]]:
    """The schema, the first byte of the stream (after an IPC file's magic), of the message after the schema,
    and the columns to read."""
    source.seek(0)
    base = 8 if source.read(len(_FILE_MAGIC)) == _FILE_MAGIC else 0
    head = next(_arrow_heads(source, base, path), None)
    if head is None:
        raise InputError(f"cannot read {path}: {_what('arrow')} (empty)")
    try:
        source.seek(base)
        schema = pa.ipc.read_schema(pa.ipc.read_message(source))
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"cannot read {path}: {_what('arrow')} ({_why(e)})") from e
    return schema, base, head.end, _text_columns(schema, path, text_field)


def _arrow_units(source: Any, path: str, text_field: str) -> tuple[list[tuple[int, int]], int]:
    """Each record batch's first byte and rows, from the messages' metadata: no body is read."""
    _, _, first, _ = _arrow_head(source, path, text_field)
    units: list[tuple[int, int]] = []
    for head in _arrow_heads(source, first, path):
        if head.kind == DICTIONARY:  # batches depend on the dictionaries before them: one unit
            return [(0, 0)], source.size()
        if head.kind == RECORD_BATCH:
            units.append((0 if not units else head.offset, head.rows))
    return units, source.size()


def _arrow_records(source: Any, path: str, text_field: str, start: int, end: int | None, row: int) -> Iterator[Record]:
    schema, base, first, columns = _arrow_head(source, path, text_field)
    if start == 0 and (end is None or end >= source.size()):  # the whole file: pyarrow's reader (dictionaries)
        yield from _whole_stream(source, path, base, first, columns)
        return
    for head in _arrow_heads(source, max(start, first), path):
        if end is not None and head.offset >= end:
            return
        if head.kind == DICTIONARY:  # table_ranges makes a file with dictionaries one range
            raise InputError(f"cannot read {path}: a dictionary batch at byte {head.offset}, inside a range")
        if head.kind == RECORD_BATCH:
            source.seek(head.offset)
            batch = pa.ipc.read_record_batch(pa.ipc.read_message(source), schema)
            yield from _records(batch, columns, row, path)
            row += batch.num_rows


def _whole_stream(source: Any, path: str, base: int, first: int, columns: list[str]) -> Iterator[Record]:
    """Every record of the file, through pyarrow's stream reader (which resolves dictionary batches) once every
    message is sized (:func:`_arrow_heads`). An IPC file is read as the stream it holds after its magic: the
    messages just checked, where its footer could point elsewhere."""
    for _ in _arrow_heads(source, first, path):
        pass
    source.seek(base)
    row = 0
    for batch in pa.ipc.open_stream(source):
        yield from _records(batch, columns, row, path)
        row += batch.num_rows
