"""The read stage's inputs that are records, not lines: MediaWiki XML dumps (``mediawiki``) and tables
(``parquet``, ``arrow``). Each file is cut into ranges of whole units that split across workers (a multistream
dump's bzip2 streams, Parquet row groups, Arrow record batches) and each range read into documents.

- ``mediawiki``: every ``<page>`` is read (:mod:`bertstream.pipelines.pretraining.mediawiki`); articles (namespace
  0, not a redirect, with text) become documents with id ``name:page_id``, their wikitext turned into paragraphs
  of plain text (:mod:`bertstream.pipelines.pretraining.wikitext`, with the dump's own names for file and
  category links); every other page is read and dropped, counted by its reason (``not_article_namespace``,
  ``redirect``, ``no_text``).
- ``parquet``, ``arrow``: one document per row, id ``name:row`` (the row in the file); the text column
  (``--text-field``) split into paragraphs at its newlines, as JSON lines are; a null text is a counted drop
  (``missing_text_field``). ``id`` and ``title`` columns, where present, are kept as the document's
  ``source_id`` and ``title`` (:mod:`bertstream.pipelines.common.columnar`).

``bytes_read`` counts the bytes of the file as stored that a range covers, so that the ranges of a file add up
to its size whatever they are (the decompressed size of a dump is known only once it is read).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.columnar import TABLE_FORMATS, read_table, table_ranges
from bertstream.pipelines.common.files import InputError, clean_line
from bertstream.pipelines.pretraining import mediawiki as M
from bertstream.pipelines.pretraining.documents import Document, text_paragraphs
from bertstream.pipelines.pretraining.wikitext import (
    DEFAULT_HIDDEN_NAMESPACES,
    hidden_namespaces_of,
    wikitext_paragraphs,
)


def record_ranges(path: str, fmt: str, size: int, range_bytes: int, text_field: str) -> list[tuple[int, int, int]]:
    """``[(start, end, first_row)]``: byte ranges of whole units tiling the file (one when ``range_bytes`` is
    0); ``first_row`` is 0 for a dump (its ids are page ids)."""
    if fmt == "mediawiki":
        if range_bytes <= 0:
            return [(0, size, 0)]
        with _binary(path) as f:
            return [(s, e, 0) for s, e in M.stream_ranges(f, range_bytes, name=path)]
    return table_ranges(path, fmt, range_bytes, text_field)


def read_records(
    path: str,
    fmt: str,
    name: str,
    counters: Counter,
    text_field: str = "text",
    start: int = 0,
    end: int | None = None,
    row: int = 0,
) -> Iterator[Document]:
    """The documents of ``[start, end)`` of a file (``end`` None: the whole file), ids made of ``name``; counts
    the bytes of the range and every dropped record (``documents_read`` of the documents yielded is the
    caller's)."""
    if fmt == "mediawiki":
        yield from _dump_documents(path, name, counters, start, end)
        return
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"unknown record format {fmt!r}")
    for r, source_id, title, text in read_table(path, fmt, text_field, start, end, row):
        if text is None:
            counters[C.drop(C.MISSING_TEXT)] += 1
            counters[C.DOCUMENTS_READ] += 1
            continue
        yield Document(f"{name}:{r}", text_paragraphs(text, counters), title=title, source_id=source_id)
    counters[C.BYTES_READ] += (_size(path) if end is None else end) - start


def _dump_documents(path: str, name: str, counters: Counter, start: int, end: int | None) -> Iterator[Document]:
    with _binary(path) as f:
        site = M.read_siteinfo(f, name=path)
        hidden = hidden_namespaces_of(site.namespaces) if site.namespaces else DEFAULT_HIDDEN_NAMESPACES
        stop = end if end is not None else f.seek(0, os.SEEK_END)
        pages = M.read_pages(f, name=path) if start == 0 and end is None else M.read_range(f, start, stop, name=path)
        for page in pages:
            reason = M.drop_reason(page)
            if reason is not None:
                counters[C.drop(reason)] += 1
                counters[C.DOCUMENTS_READ] += 1
                continue
            # Cleaned as input lines are (control characters and BOMs counted): XML allows a few.
            text = wikitext_paragraphs(page.text or "", hidden_namespaces=hidden)
            paragraphs = [p for p in (clean_line(x, counters).strip() for x in text) if p]
            yield Document(f"{name}:{page.page_id}", paragraphs, title=page.title, source_id=str(page.page_id))
        counters[C.BYTES_READ] += stop - start


@contextmanager
def _binary(path: str) -> Iterator[BinaryIO]:
    """The file as stored, seekable: a local path opened, a URL through Beam's filesystems."""
    try:
        f = open(path, "rb") if "://" not in path else FileSystems.open(path, compression_type="uncompressed")  # noqa: SIM115
    except Exception as e:
        raise InputError(f"cannot read {path}: {type(e).__name__}: {e}") from e
    with f:
        yield f


def _size(path: str) -> int:
    if "://" in path:
        found = FileSystems.match([path])[0].metadata_list
        return found[0].size_in_bytes if found else 0
    return os.path.getsize(path)
