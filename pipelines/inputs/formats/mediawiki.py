"""``mediawiki``: a MediaWiki XML dump (``enwiki-latest-pages-articles*.xml[.bz2]``, plain, bzip2 or multistream
bzip2). Every ``<page>`` is read (:mod:`bertstream.pipelines.inputs.mediawiki_xml`); articles (namespace 0, not a
redirect, with text) become documents with id ``name:page_id``, their wikitext turned into paragraphs of plain
text (:mod:`bertstream.pipelines.inputs.wikitext`, with the dump's own names for file and category links); every
other page is read and dropped, counted by its reason (``not_article_namespace``, ``redirect``, ``no_text``).

A multistream dump is cut into ranges of whole bzip2 streams that split across workers. ``bytes_read`` counts
the bytes of the file as stored that a range covers, so that the ranges of a file add up to its size whatever
they are (the decompressed size of a dump is known only once it is read).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import InputError, clean_line
from bertstream.pipelines.inputs import mediawiki_xml as M
from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.documents import Document
from bertstream.pipelines.inputs.wikitext import (
    DEFAULT_HIDDEN_NAMESPACES,
    hidden_namespaces_of,
    wikitext_paragraphs,
)

_MEDIAWIKI = re.compile(rb"<mediawiki[\s>]")  # the export's root element, after any <?xml ...?> declaration


def detect(sample: Sample) -> str | None:
    """The export's root element in the first bytes (a dump decompressed)."""
    return "a <mediawiki> export's root element" if _MEDIAWIKI.search(sample.head[:8192]) else None


def ranges(path: str, size: int, range_bytes: int, text_field: str) -> list[tuple[int, int, int]]:
    """``[(start, end, 0)]``: ranges of whole bzip2 streams tiling the file (one when ``range_bytes`` is 0, or the
    file is no page-aligned multistream); the first row is 0: a dump's ids are page ids."""
    if range_bytes <= 0:
        return [(0, size, 0)]
    with _binary(path) as f:
        return [(s, e, 0) for s, e in M.stream_ranges(f, range_bytes, name=path)]


def read(
    path: str, name: str, counters: Counter, text_field: str, start: int, end: int | None, row: int
) -> Iterator[Document]:
    """The articles of ``[start, end)`` of a dump (``end`` None: the whole file), ids made of ``name``; counts the
    bytes of the range and every page dropped (``documents_read`` of the documents yielded is the caller's)."""
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
