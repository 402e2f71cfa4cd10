"""How many rows of a Parquet row group pyarrow decodes at once (:mod:`bertstream.pipelines.inputs.columnar` reads
the file): as many as keep a batch of the wanted columns within the record cap (``MAX_RECORD_BYTES``), from the
file's metadata before a page is decoded, so that memory is bounded by the cap and not by pyarrow's batch (1,024
rows of up to the cap each could be 64 GiB).

A row of a column takes its chunk's uncompressed bytes a row (its pages as stored, decompressed), or, where the
chunk has a dictionary, its largest value if more: one dictionary value can fill every row, a few KB as stored and
gigabytes decoded. A row group whose wanted columns hold more than the cap a row is refused before it is read, and
so is a dictionary page past the cap (pyarrow decodes it whole). Pages are read through a buffer
(:data:`BUFFER_BYTES`), not a column chunk at once. Metadata that lies ends in pyarrow's error (an ``InputError``)
or a correct read; where pyarrow would abort the process instead (a column chunk's metadata whose size statistics
are malformed: pyarrow checks them in a call Python cannot catch, apache/arrow#45283), the metadata is first read in
a forked child (:func:`check_column_metadata`), whose abort is one line.
"""

from __future__ import annotations

import faulthandler
import inspect
import os
import re
import select
import signal
import subprocess
import sys
import time
import warnings
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bertstream.pipelines.common.files import InputError, record_too_big
from bertstream.pipelines.inputs import limits

BATCH_ROWS = 1024  # the most rows decoded at once (fewer where rows are large)
BUFFER_BYTES = 1 << 20  # pages read through a buffer this size (pyarrow's default, 0, reads a column chunk whole)


def check_column_metadata(pf: pq.ParquetFile, path: str, source: Any) -> None:
    """Read the metadata of every column chunk of ``pf`` as the reader will, in a forked child first: pyarrow
    aborts the whole process on a chunk whose size statistics are malformed (a C++ exception that Python cannot
    catch: ``terminate called ...``, exit 134; found by the fuzz test). The child's abort is refused here in one
    line naming the file; the metadata is already in memory, so the child reads no file. Once per file, where
    its row groups are listed (a fork of the listing process: about a millisecond). Without ``fork`` (Windows)
    the read goes on unchecked.

    A fork can also fail in the child for a reason of the process's, not the file's: in a Beam worker process
    whose gRPC channels are busy, gRPC's fork handler aborted the child before pyarrow was called (one file in
    five, with ``--direct_running_mode multi_processing``: a valid file refused). pyarrow's abort always says
    what it threw, so a child that dies saying nothing, or takes past :data:`FORK_DEADLINE_S`, is checked again
    in a fresh interpreter that reads the file's footer (``source``: the path or the open file)."""
    if not hasattr(os, "fork"):
        return
    meta = pf.metadata
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns of fork() in a process with threads: the child only
        warnings.simplefilter("ignore", DeprecationWarning)  # reads memory of its own and exits
        pid = os.fork()
    if pid == 0:
        try:
            # The abort is expected here: no "Fatal Python error: Aborted" and module list from a fault handler
            # the parent enabled (pytest's, or -X faulthandler), which writes to a descriptor of its own, not fd 2.
            faulthandler.disable()
            os.close(read_end)
            os.dup2(write_end, 2)  # pyarrow's last words, for the parent's line
            _read_column_metadata(meta)
        finally:
            os._exit(0)
    os.close(write_end)
    words, finished = _said_within(read_end, FORK_DEADLINE_S)
    if not finished:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if finished and not os.WIFSIGNALED(status):
        return
    signum = os.WTERMSIG(status) if finished else 0
    if not finished or not words.strip():  # not pyarrow's abort: the fork's own failure
        words, signum = _check_in_fresh_interpreter(_footer(source))
        if not signum:
            return
    what = re.search(r"what\(\):\s*(.+)", words)
    why = what.group(1).strip() if what else f"signal {signum}"
    raise InputError(
        f"cannot read {path}: not a readable Parquet file (its column metadata aborts pyarrow: {why[:200]})"
    )


FORK_DEADLINE_S = 60.0  # a forked child reads metadata already in memory: a millisecond; past this it is stuck


def _read_column_metadata(meta: pq.FileMetaData) -> None:
    """Every field of every column chunk's metadata the reader reads (where pyarrow may abort)."""
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for j in range(group.num_columns):
            c = group.column(j)
            _ = (c.path_in_schema, c.total_uncompressed_size, c.has_dictionary_page)
            _ = (c.dictionary_page_offset, c.data_page_offset)


def _said_within(fd: int, deadline_s: float) -> tuple[str, bool]:
    """What a child writes to pipe ``fd`` until it closes it, and whether it did within ``deadline_s``."""
    chunks: list[bytes] = []
    end = time.monotonic() + deadline_s
    with os.fdopen(fd, "rb", buffering=0) as said:
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([said], [], [], left)[0]:
                return b"".join(chunks).decode("utf-8", "replace"), False
            chunk = said.read(65536)
            if not chunk:
                return b"".join(chunks).decode("utf-8", "replace"), True
            chunks.append(chunk)


def _footer(source: Any) -> bytes:
    """The file's footer as a Parquet file of its own (``PAR1``, the metadata, its length, ``PAR1``): all that
    :func:`pyarrow.parquet.read_metadata` reads. ``source`` is a path or an open pyarrow file (its position kept)."""
    f = open(source, "rb") if isinstance(source, str) else source
    try:
        where = None if isinstance(source, str) else f.tell()
        size = f.seek(0, 2)
        f.seek(size - 8)
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        f.seek(size - 8 - length)
        body = f.read(length)
        if where is not None:
            f.seek(where)
    finally:
        if isinstance(source, str):
            f.close()
    return b"PAR1" + body + tail


def _check_in_fresh_interpreter(footer: bytes) -> tuple[str, int]:
    """(What pyarrow said, the signal that ended it or 0) reading ``footer``'s column metadata in a new Python
    process: no thread or fork handler of this one is in it. An error that is no abort is the reader's to say."""
    quiet = {**os.environ, "PYTHONFAULTHANDLER": ""}  # (empty: off) no fault handler's dump of the abort
    # The reads themselves, not this module: importing it would load Beam (seconds) to read a footer.
    probe = (
        "import sys, pyarrow as pa, pyarrow.parquet as pq\n"
        + inspect.getsource(_read_column_metadata)
        + "_read_column_metadata(pq.read_metadata(pa.BufferReader(sys.stdin.buffer.read())))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], input=footer, capture_output=True, timeout=300, env=quiet)
    return done.stderr.decode("utf-8", "replace"), max(0, -done.returncode)


def batch_rows(pf: pq.ParquetFile, source: Any, i: int, columns: list[str], path: str) -> int:
    """Rows of row group ``i`` decoded at once: as many as keep a batch of the wanted columns within the cap
    (``MAX_RECORD_BYTES``) by the file's metadata, 1 to ``BATCH_ROWS``. A row of a column takes its
    chunk's uncompressed bytes a row, or, where the chunk has a dictionary, its largest value if more (one value
    can fill every row: a few KB as stored, gigabytes decoded). A group whose wanted columns hold more than the
    cap a row is refused unread, and so is a dictionary page past the cap (pyarrow decodes it whole)."""
    cap, group = limits.MAX_RECORD_BYTES, pf.metadata.row_group(i)
    rows = group.num_rows
    if rows <= 0:
        return BATCH_ROWS
    chunks = [group.column(j) for j in range(group.num_columns)]
    wanted = {n: [c for c in chunks if c.path_in_schema == n or c.path_in_schema.startswith(n + ".")] for n in columns}
    sizes = {n: sum(c.total_uncompressed_size for c in mine) for n, mine in wanted.items()}
    if any(size < 0 for size in sizes.values()):
        raise InputError(f"cannot read {path}: not a readable Parquet file (row group {i} has a negative size)")
    if sum(sizes.values()) > cap * rows:
        names = ", ".join(repr(c) for c in columns)
        raise record_too_big(
            path, f"a row of row group {i} ({rows} rows of {sum(sizes.values())} bytes in {names})", cap
        )
    per_row = 0
    for name, mine in wanted.items():
        dictionaries = [_largest_value(pf, source, i, name, c, path) for c in mine if c.has_dictionary_page]
        per_row += max([-(-sizes[name] // rows)] + dictionaries)
    return max(1, min(BATCH_ROWS, cap // max(per_row, 1)))


def _largest_value(pf: pq.ParquetFile, source: Any, i: int, name: str, chunk: pq.ColumnChunkMetaData, path: str) -> int:
    """The bytes of the largest value of a column chunk's dictionary, decoded by pyarrow with one row (its
    dictionary page whole) once its page header says the page is within the cap."""
    cap = limits.MAX_RECORD_BYTES
    size = _dictionary_bytes(source, chunk)
    if size is None or chunk.path_in_schema != name:  # (a header not read so, a nested column: the page's size)
        return max(size or 0, chunk.total_uncompressed_size)
    if size > cap:
        raise record_too_big(path, f"the dictionary of {name!r} in row group {i}", cap)
    one = pq.ParquetFile(source, metadata=pf.metadata, read_dictionary=[name], buffer_size=BUFFER_BYTES)
    batch = next(one.iter_batches(batch_size=1, row_groups=[i], columns=[name]), None)
    column = batch.column(0) if batch is not None else None
    if column is None or not pa.types.is_dictionary(column.type) or len(column.dictionary) == 0:
        return 0
    try:
        return int(pc.max(pc.binary_length(column.dictionary)).as_py() or 0)
    except pa.ArrowNotImplementedError:  # (not text nor binary: fixed-width values, in the chunk's size)
        return 0


def _dictionary_bytes(source: Any, chunk: pq.ColumnChunkMetaData) -> int | None:
    """The uncompressed size of a column chunk's dictionary page from its page header (thrift compact:
    ``PageHeader`` starts with its fields 1, the page type, and 2, ``uncompressed_page_size``, both i32), or None
    where the header cannot be read so."""
    try:
        raw = _read_at(source, chunk.dictionary_page_offset, 32)
    except (OSError, ValueError, pa.ArrowException):
        return None
    fields: dict[int, int] = {}
    at, field = 0, 0
    while len(fields) < 2 and at < len(raw):
        head = raw[at]
        at += 1
        if head >> 4 == 0 or head & 0x0F != 5:  # (long-form ids or other types: not what writers put first)
            return None
        field += head >> 4
        value, shift = 0, 0
        while at < len(raw) and shift < 35:
            byte = raw[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        fields[field] = (value >> 1) ^ -(value & 1)  # zigzag
    if fields.get(1) != 2 or fields.get(2, -1) < 0:  # 2: DICTIONARY_PAGE
        return None
    return fields[2]


def _read_at(source: Any, at: int, n: int) -> bytes:
    if isinstance(source, str):
        with open(source, "rb") as f:
            f.seek(at)
            return f.read(n)
    source.seek(at)
    return bytes(source.read(n))
