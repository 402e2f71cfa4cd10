"""Reading: files -> documents with stable ids, whatever the format (each format's module in ``formats/``
parses; this module cuts files into ranges and feeds the parsers). Pure functions (``bertprep vocab`` and
``bertprep extract`` call them) do the work; the ``ReadDocuments`` composite, the pretraining job's first stage,
only cuts big files into ranges, distributes them over workers, batches the documents and reports progress.

A document id is ``<name>:<offset>``: the file's name (its path below the inputs' common folder) and the byte
offset, in the decompressed file, of the line where the document starts (just ``<name>`` for ``text``;
``name:page_id`` and ``name:row`` for dumps and tables). It is stable across runs, runners, argument order and
range sizes. Compression (gzip, bz2, zstd, lzma) follows the file extension; compressed files, and files of a
format that does not split (``text``), are read whole, by one worker.

Reading a range of a format of lines: a segment may start only at an *anchor*, a line start where the parser
holds no state from earlier lines (each format's ``anchor``): every line for ``jsonl`` and ``lines``, a
``<doc ...>`` line for ``wikiextractor`` (it closes an open document exactly as the end of input does), a blank
line for ``sentences`` (it ends the document before it exactly as the end of input does). A line is judged as
the parser sees it: its first part up to a lone CR, cleaned and stripped. Formats of records (dumps, tables) cut
their files into whole units themselves (``ranges``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import progress as P
from bertstream.pipelines.common.files import (
    COMPRESSED_SUFFIXES,
    InputError,
    Line,
    block_lines,
    check_unchanged,
    check_utf8_start,
    read_chunks,
)
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.byte_ranges import (
    BLOCK_BYTES,
    Block,
    LineTooLong,
    cut_blocks,
    line_cap,
    segment_blocks,
    split_ranges,
)
from bertstream.pipelines.inputs.documents import Document, DocumentBatch
from bertstream.pipelines.inputs.formats import LINE_FORMATS, RECORD_FORMATS, format_module

DOCS_PER_BATCH_BYTES = 2 << 20
# Range size: about RANGES_PER_INPUT ranges over all inputs, so a 10 MB file feeds several workers, within
# bounds so that a 20 GB corpus is not cut into crumbs (each range costs an element and a file open).
RANGES_PER_INPUT = 64
MIN_RANGE_BYTES = 1 << 20
MAX_RANGE_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class FileRange:
    """One Beam element of the read stage: bytes ``[start, end)`` of a file (``end`` None: to its end)."""

    path: str
    format: str
    name: str  # what document ids are made of
    start: int = 0
    end: int | None = None
    size: int = -1  # as listed (-1: unknown, not checked)
    mtime: float = 0.0
    row: int = 0  # the first row of the range (parquet, arrow): what its documents' ids count from


def splittable(path: str, input_format: str) -> bool:
    """Byte ranges need seeking in the file as stored and a format of lines that splits: not compressed, not
    ``text``."""
    if input_format not in LINE_FORMATS or not format_module(input_format).SPLITS:
        return False
    return not path.lower().endswith(COMPRESSED_SUFFIXES)


def range_bytes_for(total_bytes: int) -> int:
    """The range size for a run over ``total_bytes`` of input (see ``RANGES_PER_INPUT``)."""
    return min(MAX_RANGE_BYTES, max(MIN_RANGE_BYTES, total_bytes // RANGES_PER_INPUT))


def file_ranges(
    path: str,
    input_format: str,
    name: str,
    size: int,
    range_bytes: int,
    mtime: float | None = None,
    text_field: str = "text",
) -> list[FileRange]:
    """The ranges one file is read in: one for a small, compressed or ``text`` file; whole units for dumps
    and tables (their format's ``ranges``). With ``mtime`` (as listed) each range checks that the file still
    has that size and time once it is read."""
    listed = (size, mtime) if mtime is not None else (-1, 0.0)
    if input_format in RECORD_FORMATS:
        ranges = format_module(input_format).ranges(path, size, range_bytes, text_field)
        return [FileRange(path, input_format, name, s, e, *listed, row=row) for s, e, row in ranges]
    if not splittable(path, input_format):
        return [FileRange(path, input_format, name, 0, None, *listed)]
    return [FileRange(path, input_format, name, s, e, *listed) for s, e in split_ranges(size, range_bytes)]


def read_segment(
    path: str, input_format: str, start: int, end: int | None, block_bytes: int = BLOCK_BYTES
) -> Iterator[Block]:
    """The blocks of the segment of range ``[start, end)`` of a splittable file (see ``bertstream.pipelines.inputs.byte_ranges``).

    Beam's local, GCS (``BlobReader``) and S3 (``DownloaderStream``) readers all seek.
    """
    if not splittable(path, input_format):
        raise ValueError(f"{path} ({input_format}) cannot be read in ranges")
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            anchor = format_module(input_format).anchor
            for block in segment_blocks(f, start, end, anchor, block_bytes, limits.MAX_RECORD_BYTES):
                if block[0] == 0:
                    check_utf8_start(path, block[1])
                yield block
    except (InputError, LineTooLong):
        raise
    except Exception as e:
        raise InputError(f"cannot read {path}: {type(e).__name__}: {e}") from e


def read_documents(
    path: str,
    input_format: str,
    counters: Counter,
    strip_gutenberg: bool = True,
    name: str | None = None,
    start: int = 0,
    end: int | None = None,
    listed: tuple[int, float] = (-1, 0.0),
    text_field: str = "text",
    row: int = 0,
) -> Iterator[Document]:
    """Every document of one file, or of the range ``[start, end)`` of it, in file order; counts bytes, lines and
    documents. Document ids are ``name:offset`` (``name`` defaults to the path; ``name:page_id`` and ``name:row``
    for dumps and tables, ``row`` being the range's first). ``listed``: the file's size and modification time
    when it was listed; the run fails if it changed by the time its documents are read. ``text_field``: the
    field (``jsonl``) or column (``parquet``, ``arrow``) that holds the text."""
    if input_format in RECORD_FORMATS:
        records = format_module(input_format).read(path, name or path, counters, text_field, start, end, row)
        for doc in records:
            counters[C.DOCUMENTS_READ] += 1
            yield doc
        check_unchanged(path, *listed)
        return
    if start == 0 and end is None:
        blocks: Iterable[Block] = cut_blocks(read_chunks(path), 0, limits.MAX_RECORD_BYTES)
    else:
        blocks = read_segment(path, input_format, start, end)

    def lines() -> Iterator[Line]:
        for off, raw in blocks:
            counters[C.BYTES_READ] += len(raw)
            yield from block_lines(off, raw, counters)

    parse = format_module(input_format).parse
    with line_cap(path):  # a line past the cap: refused, naming the file
        for doc in parse(lines(), name or path, counters, strip_gutenberg=strip_gutenberg, text_field=text_field):
            counters[C.DOCUMENTS_READ] += 1
            yield doc
    check_unchanged(path, *listed)


def batch_documents(
    docs: Iterable[Document], counters: Counter, max_bytes: int = DOCS_PER_BATCH_BYTES
) -> Iterator[DocumentBatch]:
    """Group documents into batches of about ``max_bytes`` of text so Beam elements stay coarse.

    The counters of the file travel with its last batch (other batches carry empty counters).
    """
    batch: list[Document] = []
    size = 0
    for doc in docs:
        batch.append(doc)
        size += sum(len(p) for p in doc.paragraphs) + 1
        if size >= max_bytes:
            yield DocumentBatch(batch)
            batch, size = [], 0
    yield DocumentBatch(batch, counters)


def range_documents(
    r: FileRange, counters: Counter, strip_gutenberg: bool = True, text_field: str = "text"
) -> Iterator[Document]:
    """The documents of one range; the file is counted once, by its range at offset 0."""
    if r.start == 0:
        counters[C.FILES_READ] += 1
    listed = (r.size, r.mtime)
    return read_documents(
        r.path, r.format, counters, strip_gutenberg, r.name, r.start, r.end, listed, text_field, r.row
    )


def read_range(r: FileRange, strip_gutenberg: bool = True, text_field: str = "text") -> Iterator[DocumentBatch]:
    """The document batches of one range (:func:`range_documents`), the counters with the last."""
    counters: Counter = Counter()
    yield from batch_documents(range_documents(r, counters, strip_gutenberg, text_field), counters)


def ranges_of(file: tuple, range_bytes: int, text_field: str = "text") -> list[FileRange]:
    """The ranges of one input ``(path, format, name[, size[, mtime]])``: without a size (the older 3-tuple) a
    file is one range; with its listed mtime, a file that changes before it is read fails the run."""
    path, input_format, name, *rest = file
    mtime = rest[1] if len(rest) > 1 else None
    return file_ranges(path, input_format, name, rest[0] if rest else 0, range_bytes, mtime, text_field)


@dataclass(frozen=True, slots=True)
class ReadSpec:
    """The read stage: Gutenberg boilerplate cut or kept, the range size big files are split by, the field or
    column of record formats that holds the text."""

    strip_gutenberg: bool = True
    range_bytes: int = MIN_RANGE_BYTES
    text_field: str = "text"


class _ReadRangeFn(beam.DoFn):
    def __init__(self, spec: ReadSpec) -> None:
        self.spec = spec

    def process(self, element: FileRange) -> Iterator[DocumentBatch]:
        for batch in read_range(element, self.spec.strip_gutenberg, self.spec.text_field):
            C.report(batch.counters)
            yield batch
        c, whole = batch.counters, element.start == 0 and element.end is None
        where = element.path if whole else f"{element.path} from byte {element.start}"
        # The run's live line counts the range; the line of its own is a detail (--verbose): a corpus has
        # thousands of files.
        # The live line's MB are the input's, as listed (a .gz counts its compressed bytes), so that they add up to
        # the run's input MB; the text they held is counted apart.
        end = element.end if element.end is not None else element.size
        span = end - element.start if end >= 0 else c[C.BYTES_READ]
        P.add("read", files=c[C.FILES_READ], bytes=span, text=c[C.BYTES_READ], documents=c[C.DOCUMENTS_READ])
        P.detail(f"read {where}: {c[C.DOCUMENTS_READ]} documents, {c[C.BYTES_READ] / 1e6:.1f} MB")

    def finish_bundle(self) -> None:
        P.flush()  # the ranges counted since the last write (at most every FLUSH_S): the summary reads them


class ReadDocuments(beam.PTransform):
    """``PCollection[(path, format, name, size)]`` -> ``PCollection[DocumentBatch]``; ``name`` makes the ids.

    Big splittable files are read in ranges of ``range_bytes`` by many workers; the documents, their ids and
    the counters are the same whatever ``range_bytes`` is.
    """

    def __init__(
        self, strip_gutenberg: bool = True, range_bytes: int = MIN_RANGE_BYTES, text_field: str = "text"
    ) -> None:
        super().__init__()
        self.spec = ReadSpec(strip_gutenberg, range_bytes, text_field)

    def expand(self, files):
        return (
            files
            | "SplitFiles" >> beam.FlatMap(ranges_of, self.spec.range_bytes, self.spec.text_field)
            # Spread ranges over workers: without it, the runner reads them all in one bundle.
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRange" >> beam.ParDo(_ReadRangeFn(self.spec))
        )
