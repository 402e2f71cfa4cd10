"""Stage 1, Read: files -> documents with stable ids, for four input formats.

Pure functions (``decode_block``, ``clean_line``, ``parse_*``, ``read_documents``) do the work; the
``ReadDocuments`` composite only distributes files over workers and batches the documents.

Formats:
- ``sentences``: one sentence per line, a blank line between documents (BERT's own input).
- ``wikiextractor``: ``<doc id url title>`` ... ``</doc>`` blocks; the first line is the title (not a
  sentence) and is skipped; then one paragraph per line.
- ``text``: a file is one document (a book); paragraphs are separated by blank lines and hard-wrapped lines
  are joined. Project Gutenberg header and licence are cut at their ``*** START/END OF`` markers.
- ``jsonl``: one JSON object per line with a string ``text`` (paragraphs separated by newlines) and an
  optional ``id``.

A document id is ``<path>:<line>`` (the line where the document starts; just ``<path>`` for ``text``): stable
across runs, runners and argument order. Compression (gzip, bz2, zstd, lzma) follows the file extension.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipelines import counters as C

BLOCK_BYTES = 8 << 20
DOCS_PER_BATCH_BYTES = 2 << 20

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufeff\ufffe]")
_VERTICAL = re.compile(r"[\x0b\x0c\x85\u2028\u2029]")
_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_WIKI_OPEN = re.compile(r"^<doc\b[^>]*>\s*$")


class InputError(RuntimeError):
    """An input file cannot be read (corrupt compressed data, unreadable path): the run must stop."""


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


def decode_block(raw: bytes, counters: Counter) -> str:
    """UTF-8 decode; invalid bytes become U+FFFD and are counted, never dropped silently."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        # U+FFFD present in valid input is encoded as EF BF BD; only count the ones we introduced.
        counters[C.INVALID_UTF8] += text.count("\ufffd") - raw.count(b"\xef\xbf\xbd")
        return text


def clean_line(line: str, counters: Counter) -> str:
    """Drop control characters and byte-order marks (counted); vertical tabs/form feeds become spaces."""
    if _VERTICAL.search(line):
        line = _VERTICAL.sub(" ", line)
    line, n = _CONTROL.subn("", line)
    if n:
        counters[C.CONTROL_CHARS] += n
    return line


def iter_lines(chunks: Iterable[bytes], counters: Counter) -> Iterator[str]:
    """Decoded, cleaned lines (no terminators) from a byte stream; CRLF and lone CR end lines too.

    Works in blocks cut at newlines, so a multi-megabyte line without a newline is still one line and
    memory stays bounded by the longest line.
    """
    pending = b""
    for chunk in chunks:
        if not chunk:
            continue
        data = pending + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        pending = data[cut + 1 :]
        yield from _split_lines(decode_block(data[: cut + 1], counters), counters, final=False)
    if pending:
        yield from _split_lines(decode_block(pending, counters), counters, final=True)


def _split_lines(text: str, counters: Counter, final: bool) -> Iterator[str]:
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if not final and lines and lines[-1] == "":
        lines.pop()  # the block ended with a newline
    for line in lines:
        counters[C.LINES] += 1
        yield clean_line(line, counters)


def parse_sentences(lines: Iterable[str], path: str) -> Iterator[Document]:
    doc: Document | None = None
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            if doc is not None:
                yield doc
                doc = None
            continue
        if doc is None:
            doc = Document(f"{path}:{n}", [], presegmented=True)
        doc.paragraphs.append(s)
    if doc is not None:
        yield doc


def parse_wikiextractor(lines: Iterable[str], path: str, counters: Counter) -> Iterator[Document]:
    doc: Document | None = None
    expect_title = False
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if doc is None:
            if _WIKI_OPEN.match(s):
                doc = Document(f"{path}:{n}", [])
                expect_title = True
            elif s:
                counters[C.LINES_OUTSIDE_DOC] += 1
            continue
        if s == "</doc>":
            yield doc
            doc = None
            continue
        if _WIKI_OPEN.match(s):
            counters[C.UNCLOSED_DOC] += 1  # a <doc> without </doc>: keep what we have, start anew
            yield doc
            doc = Document(f"{path}:{n}", [])
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


def parse_text(lines: Iterable[str], path: str, counters: Counter, strip_gutenberg: bool = True) -> Iterator[Document]:
    paragraphs: list[str] = []
    current: list[str] = []
    # Lines after a START marker replace whatever came before it (the Gutenberg header).
    for line in lines:
        s = line.strip()
        if strip_gutenberg and _GUTENBERG_START.match(s):
            counters[C.GUTENBERG_STRIPPED] += 1
            paragraphs, current = [], []
            continue
        if strip_gutenberg and _GUTENBERG_END.match(s):
            break  # the licence follows
        if s:
            current.append(s)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    yield Document(path, paragraphs)


def parse_jsonl(lines: Iterable[str], path: str, counters: Counter) -> Iterator[Document]:
    for n, line in enumerate(lines, 1):
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
        if not isinstance(text, str):
            counters[C.drop(C.MISSING_TEXT)] += 1
            counters[C.DOCUMENTS_READ] += 1
            continue
        # Newlines inside the JSON string are paragraph breaks; clean them as lines.
        paragraphs = [p for p in (clean_line(x, counters).strip() for x in re.split(r"\r\n|\r|\n", text)) if p]
        yield Document(f"{path}:{n}", paragraphs)


def parse(lines: Iterable[str], path: str, input_format: str, counters: Counter, strip_gutenberg: bool = True) -> Iterator[Document]:
    if input_format == "sentences":
        return parse_sentences(lines, path)
    if input_format == "wikiextractor":
        return parse_wikiextractor(lines, path, counters)
    if input_format == "text":
        return parse_text(lines, path, counters, strip_gutenberg)
    if input_format == "jsonl":
        return parse_jsonl(lines, path, counters)
    raise ValueError(f"unknown input format {input_format!r}")


def _decompressed(raw, path: str, block_bytes: int) -> Iterator[bytes]:
    """Decompress by extension with integrity checks.

    Beam's own codecs stop silently at a truncated stream (data loss); Python's gzip/bz2/lzma readers raise
    on truncation and CRC errors, and zstd frames are checked for completeness here.
    """
    lower = path.lower()
    if lower.endswith((".zst", ".zstd")):
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        obj = dctx.decompressobj()
        in_frame = False
        while chunk := raw.read(block_bytes):
            while chunk:
                in_frame = True
                out = obj.decompress(chunk)
                if out:
                    yield out
                chunk = b""
                if obj.eof:  # frame complete; what follows starts another frame
                    chunk, obj, in_frame = obj.unused_data, dctx.decompressobj(), False
        if in_frame:
            raise EOFError("zstd stream ended inside a frame (truncated file)")
        return
    if lower.endswith((".gz", ".gzip")):
        f = gzip.GzipFile(fileobj=raw, mode="rb")
    elif lower.endswith(".bz2"):
        f = bz2.BZ2File(raw, mode="rb")
    elif lower.endswith((".xz", ".lzma")):
        f = lzma.LZMAFile(raw, mode="rb")
    else:
        f = raw
    while chunk := f.read(block_bytes):
        yield chunk


def read_chunks(path: str, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Raw (decompressed) bytes of a file on any Beam filesystem; failures name the file."""
    try:
        with FileSystems.open(path, compression_type="uncompressed") as raw:
            yield from _decompressed(raw, path, block_bytes)
    except Exception as e:  # EOFError, zlib.error, OSError, zstd errors, ...: all fatal, all named
        raise InputError(f"cannot read {path}: {type(e).__name__}: {e}") from e


def read_documents(path: str, input_format: str, counters: Counter, strip_gutenberg: bool = True,
                   name: str | None = None) -> Iterator[Document]:
    """Every document of one file, in file order; counts bytes, lines and documents. Document ids are
    ``name:line`` (``name`` defaults to the path)."""

    def chunks() -> Iterator[bytes]:
        for chunk in read_chunks(path):
            counters[C.BYTES_READ] += len(chunk)
            yield chunk

    for doc in parse(iter_lines(chunks(), counters), name or path, input_format, counters, strip_gutenberg):
        counters[C.DOCUMENTS_READ] += 1
        yield doc


def batch_documents(docs: Iterable[Document], counters: Counter, max_bytes: int = DOCS_PER_BATCH_BYTES) -> Iterator[DocumentBatch]:
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


class _ReadFileFn(beam.DoFn):
    def __init__(self, strip_gutenberg: bool) -> None:
        self.strip_gutenberg = strip_gutenberg

    def process(self, element: tuple[str, str, str]) -> Iterator[DocumentBatch]:
        path, input_format, name = element
        counters: Counter = Counter()
        counters[C.FILES_READ] += 1
        docs = read_documents(path, input_format, counters, self.strip_gutenberg, name)
        for batch in batch_documents(docs, counters):
            C.report(batch.counters)
            yield batch
        C.progress(f"read {path}: {counters[C.DOCUMENTS_READ]} documents, {counters[C.BYTES_READ] / 1e6:.1f} MB")


class ReadDocuments(beam.PTransform):
    """``PCollection[(path, format, name)]`` -> ``PCollection[DocumentBatch]``; ``name`` makes the ids."""

    def __init__(self, strip_gutenberg: bool = True) -> None:
        super().__init__()
        self.strip_gutenberg = strip_gutenberg

    def expand(self, paths):
        return (
            paths
            # Spread files over workers: without it, the runner reads them all in one bundle.
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFile" >> beam.ParDo(_ReadFileFn(self.strip_gutenberg))
        )
