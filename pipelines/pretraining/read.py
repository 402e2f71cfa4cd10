"""Stage 1, Read: files -> documents with stable ids, for five input formats.

Pure functions (``parse_*``, ``read_documents``, over the lines of :mod:`bertstream.pipelines.common.files`) do the work;
the ``ReadDocuments`` composite only cuts big files into byte ranges (``bertstream.pipelines.common.byte_ranges``), distributes
them over workers and batches the documents.

Formats:
- ``sentences``: one sentence per line, a blank line between documents (BERT's own input).
- ``wikiextractor``: ``<doc id url title>`` ... ``</doc>`` blocks; the first line is the title (not a
  sentence) and is skipped; then one paragraph per line.
- ``text``: a file is one document (a book); paragraphs are separated by blank lines and hard-wrapped lines
  are joined. Project Gutenberg header and licence are cut at their ``*** START/END OF`` markers (the cut
  lines counted); a file of several Gutenberg books gives one document per book.
- ``jsonl``: one JSON object per line with a string ``text`` (paragraphs separated by newlines) and an
  optional ``id``.
- ``lines``: one document per line, a paragraph to segment (CLUECorpusSmall's layout); blank lines skipped.

A document id is ``<name>:<offset>``: the file's name (its path below the inputs' common folder) and the byte
offset, in the decompressed file, of the line where the document starts (just ``<name>`` for ``text``). It is
stable across runs, runners, argument order and range sizes. Compression (gzip, bz2, zstd, lzma) follows the
file extension; compressed files and ``text`` files are read whole, by one worker.

Reading a range: a segment may start only at an *anchor*, a line start where the parser holds no state from
earlier lines (see ``ANCHORS``): every line for ``jsonl``, a ``<doc ...>`` line for ``wikiextractor`` (it
closes an open document exactly as the end of input does), a blank line for ``sentences`` (it ends the
document before it exactly as the end of input does). A line is judged as the parser sees it: its first part
up to a lone CR, cleaned and stripped.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.byte_ranges import (
    BLOCK_BYTES,
    AnchorTest,
    Block,
    cut_blocks,
    segment_blocks,
    split_ranges,
)
from bertstream.pipelines.common.files import (
    COMPRESSED_SUFFIXES,
    InputError,
    Line,
    block_lines,
    check_unchanged,
    check_utf8_start,
    clean_line,
    decode_block,
    read_chunks,
)
from bertstream.pipelines.pretraining import progress as P

DOCS_PER_BATCH_BYTES = 2 << 20
# Range size: about RANGES_PER_INPUT ranges over all inputs, so a 10 MB file feeds several workers, within
# bounds so that a 20 GB corpus is not cut into crumbs (each range costs an element and a file open).
RANGES_PER_INPUT = 64
MIN_RANGE_BYTES = 1 << 20
MAX_RANGE_BYTES = 64 << 20

_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_WIKI_OPEN = re.compile(r"^<doc\b[^>]*>\s*$")
_VISIBLE_ASCII_BEFORE_CR = re.compile(rb"[^\r!-~]*[!-~]")


@dataclass(slots=True)
class Document:
    """A document before segmentation.

    ``paragraphs`` hold text to segment, or finished sentences when ``presegmented`` (``sentences`` format).
    """

    doc_id: str
    paragraphs: list[str]
    presegmented: bool = False


@dataclass(slots=True)
class DocumentBatch:
    """Documents of one file (or part of one), with the counters of reading them."""

    documents: list[Document]
    counters: Counter = field(default_factory=Counter)


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


def parse_sentences(lines: Iterable[Line], path: str) -> Iterator[Document]:
    doc: Document | None = None
    for offset, line in lines:
        s = line.strip()
        if not s:
            if doc is not None:
                yield doc
                doc = None
            continue
        if doc is None:
            doc = Document(f"{path}:{offset}", [], presegmented=True)
        doc.paragraphs.append(s)
    if doc is not None:
        yield doc


def parse_lines(lines: Iterable[Line], path: str) -> Iterator[Document]:
    for offset, line in lines:
        s = line.strip()
        if s:
            yield Document(f"{path}:{offset}", [s])


def parse_wikiextractor(lines: Iterable[Line], path: str, counters: Counter) -> Iterator[Document]:
    doc: Document | None = None
    expect_title = False
    for offset, line in lines:
        s = line.strip()
        if doc is None:
            if s.startswith("<doc") and _WIKI_OPEN.match(s):
                doc = Document(f"{path}:{offset}", [])
                expect_title = True
            elif s:
                counters[C.LINES_OUTSIDE_DOC] += 1
            continue
        if s == "</doc>":
            yield doc
            doc = None
            continue
        if s.startswith("<doc") and _WIKI_OPEN.match(s):  # the regex only where it can match: ~5x cheaper
            counters[C.UNCLOSED_DOC] += 1  # a <doc> without </doc>: keep what we have, start anew
            yield doc
            doc = Document(f"{path}:{offset}", [])
            expect_title = True
            continue
        if not s:
            continue
        if expect_title:
            expect_title = False  # the title line is not a sentence
            continue
        doc.paragraphs.append(s)
    if doc is not None:
        counters[C.UNCLOSED_DOC] += 1
        yield doc


def parse_text(lines: Iterable[Line], path: str, counters: Counter, strip_gutenberg: bool = True) -> Iterator[Document]:
    """One document per book. A file may hold several Gutenberg books: each ``*** START`` after an ``*** END``
    starts another book (id ``path:offset`` of its START line; the first keeps the id ``path``). Header and
    licence lines cut at the markers are counted, never dropped silently."""
    paragraphs: list[str] = []
    current: list[str] = []
    doc_id, kept = path, 0  # kept: non-blank lines of the book so far
    after_end, yielded = False, False
    for offset, line in lines:
        s = line.strip()
        # A marker line starts with "***" (``s`` is stripped): the two regexes only run on such lines.
        marker = strip_gutenberg and s.startswith("***")
        if marker and _GUTENBERG_START.match(s):
            counters[C.GUTENBERG_STRIPPED] += 1
            # Lines before a START marker are the header: they go, counted.
            counters[C.GUTENBERG_LINES_STRIPPED] += kept
            if after_end:
                doc_id, after_end = f"{path}:{offset}", False
            paragraphs, current, kept = [], [], 0
            continue
        if after_end:
            counters[C.GUTENBERG_LINES_STRIPPED] += bool(s)  # the licence, or text of no book
            continue
        if marker and _GUTENBERG_END.match(s):
            counters[C.GUTENBERG_LINES_STRIPPED] += 1  # the marker itself
            if current:
                paragraphs.append(" ".join(current))
            yield Document(doc_id, paragraphs)
            yielded, after_end, paragraphs, current, kept = True, True, [], [], 0
            continue
        if s:
            current.append(s)
            kept += 1
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if not after_end and (kept or not yielded):
        if current:
            paragraphs.append(" ".join(current))
        yield Document(doc_id, paragraphs)


def parse_jsonl(lines: Iterable[Line], path: str, counters: Counter) -> Iterator[Document]:
    for offset, line in lines:
        s = line.strip()
        if not s:
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError:
            counters[C.drop(C.MALFORMED_JSON)] += 1
            counters[C.DOCUMENTS_READ] += 1
            continue
        text = obj.get("text") if isinstance(obj, dict) else None
        if not isinstance(text, str):  # "text": 5 is no missing field: each its own reason
            counters[C.drop(C.TEXT_NOT_STRING if isinstance(obj, dict) and "text" in obj else C.MISSING_TEXT)] += 1
            counters[C.DOCUMENTS_READ] += 1
            continue
        # Newlines inside the JSON string are paragraph breaks; clean them as lines.
        paragraphs = [p for p in (clean_line(x, counters).strip() for x in re.split(r"\r\n|\r|\n", text)) if p]
        yield Document(f"{path}:{offset}", paragraphs)


def parse(
    lines: Iterable[Line], path: str, input_format: str, counters: Counter, strip_gutenberg: bool = True
) -> Iterator[Document]:
    if input_format == "sentences":
        return parse_sentences(lines, path)
    if input_format == "wikiextractor":
        return parse_wikiextractor(lines, path, counters)
    if input_format == "text":
        return parse_text(lines, path, counters, strip_gutenberg)
    if input_format == "jsonl":
        return parse_jsonl(lines, path, counters)
    if input_format == "lines":
        return parse_lines(lines, path)
    raise ValueError(f"unknown input format {input_format!r}")


def _parser_view(raw: bytes) -> str:
    """A physical line's first line as the parser sees it: up to a lone CR (or the CR of CRLF), cleaned,
    stripped. Its counters are thrown away: the line is counted where it is parsed, not where it is judged."""
    scratch: Counter = Counter()
    return clean_line(decode_block(raw.split(b"\r", 1)[0], scratch), scratch).strip()


def is_wikiextractor_anchor(raw: bytes) -> bool:
    """A ``<doc ...>`` line: the parser starts a document there whatever came before (an unclosed document
    is counted and yielded, as the end of input does)."""
    return b"<" in raw and bool(_WIKI_OPEN.match(_parser_view(raw)))


def is_sentences_anchor(raw: bytes) -> bool:
    """A blank line: it ends the document before it, as the end of input does, and starts none."""
    if _VISIBLE_ASCII_BEFORE_CR.match(raw):  # shortcut: such a byte decodes to itself and survives cleaning
        return False
    return not _parser_view(raw)


# Where a segment may start, per splittable format (None: at every line; jsonl lines stand alone).
ANCHORS: dict[str, AnchorTest] = {
    "jsonl": None,
    "lines": None,
    "wikiextractor": is_wikiextractor_anchor,
    "sentences": is_sentences_anchor,
}


def splittable(path: str, input_format: str) -> bool:
    """Byte ranges need seeking in the file as stored and a format with anchors: not compressed, not ``text``."""
    return input_format in ANCHORS and not path.lower().endswith(COMPRESSED_SUFFIXES)


def range_bytes_for(total_bytes: int) -> int:
    """The range size for a run over ``total_bytes`` of input (see ``RANGES_PER_INPUT``)."""
    return min(MAX_RANGE_BYTES, max(MIN_RANGE_BYTES, total_bytes // RANGES_PER_INPUT))


def file_ranges(
    path: str, input_format: str, name: str, size: int, range_bytes: int, mtime: float | None = None
) -> list[FileRange]:
    """The ranges one file is read in: one for a small, compressed or ``text`` file. With ``mtime`` (as listed)
    each range checks that the file still has that size and time once it is read."""
    listed = (size, mtime) if mtime is not None else (-1, 0.0)
    if not splittable(path, input_format):
        return [FileRange(path, input_format, name, 0, None, *listed)]
    return [FileRange(path, input_format, name, s, e, *listed) for s, e in split_ranges(size, range_bytes)]


def read_segment(
    path: str, input_format: str, start: int, end: int | None, block_bytes: int = BLOCK_BYTES
) -> Iterator[Block]:
    """The blocks of the segment of range ``[start, end)`` of a splittable file (see ``bertstream.pipelines.common.byte_ranges``).

    Beam's local, GCS (``BlobReader``) and S3 (``DownloaderStream``) readers all seek.
    """
    if not splittable(path, input_format):
        raise ValueError(f"{path} ({input_format}) cannot be read in ranges")
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            for block in segment_blocks(f, start, end, ANCHORS[input_format], block_bytes):
                if block[0] == 0:
                    check_utf8_start(path, block[1])
                yield block
    except InputError:
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
) -> Iterator[Document]:
    """Every document of one file, or of the range ``[start, end)`` of it, in file order; counts bytes, lines and
    documents. Document ids are ``name:offset`` (``name`` defaults to the path). ``listed``: the file's size and
    modification time when it was listed; the run fails if it changed by the time its documents are read."""
    if start == 0 and end is None:
        blocks: Iterable[Block] = cut_blocks(read_chunks(path))
    else:
        blocks = read_segment(path, input_format, start, end)

    def lines() -> Iterator[Line]:
        for off, raw in blocks:
            counters[C.BYTES_READ] += len(raw)
            yield from block_lines(off, raw, counters)

    for doc in parse(lines(), name or path, input_format, counters, strip_gutenberg):
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


def read_range(r: FileRange, strip_gutenberg: bool = True) -> Iterator[DocumentBatch]:
    """The document batches of one range; the file is counted once, by its range at offset 0."""
    counters: Counter = Counter()
    if r.start == 0:
        counters[C.FILES_READ] += 1
    docs = read_documents(r.path, r.format, counters, strip_gutenberg, r.name, r.start, r.end, (r.size, r.mtime))
    yield from batch_documents(docs, counters)


def _ranges_of(file: tuple, range_bytes: int) -> list[FileRange]:
    # (path, format, name[, size[, mtime]]): without a size (the older 3-tuple) a file is one range; with its
    # listed mtime, a file that changes before it is read fails the run.
    path, input_format, name, *rest = file
    return file_ranges(
        path, input_format, name, rest[0] if rest else 0, range_bytes, rest[1] if len(rest) > 1 else None
    )


class _ReadRangeFn(beam.DoFn):
    def __init__(self, strip_gutenberg: bool) -> None:
        self.strip_gutenberg = strip_gutenberg

    def process(self, element: FileRange) -> Iterator[DocumentBatch]:
        for batch in read_range(element, self.strip_gutenberg):
            C.report(batch.counters)
            yield batch
        c, whole = batch.counters, element.start == 0 and element.end is None
        where = element.path if whole else f"{element.path} from byte {element.start}"
        # The run's live line counts the range; the line of its own is a detail (--verbose): a corpus has
        # thousands of files.
        P.add("read", final=True, files=c[C.FILES_READ], bytes=c[C.BYTES_READ], documents=c[C.DOCUMENTS_READ])
        P.detail(f"read {where}: {c[C.DOCUMENTS_READ]} documents, {c[C.BYTES_READ] / 1e6:.1f} MB")


class ReadDocuments(beam.PTransform):
    """``PCollection[(path, format, name, size)]`` -> ``PCollection[DocumentBatch]``; ``name`` makes the ids.

    Big splittable files are read in ranges of ``range_bytes`` by many workers; the documents, their ids and
    the counters are the same whatever ``range_bytes`` is.
    """

    def __init__(self, strip_gutenberg: bool = True, range_bytes: int = MIN_RANGE_BYTES) -> None:
        super().__init__()
        self.strip_gutenberg = strip_gutenberg
        self.range_bytes = range_bytes

    def expand(self, files):
        return (
            files
            | "SplitFiles" >> beam.FlatMap(_ranges_of, self.range_bytes)
            # Spread ranges over workers: without it, the runner reads them all in one bundle.
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRange" >> beam.ParDo(_ReadRangeFn(self.strip_gutenberg))
        )
