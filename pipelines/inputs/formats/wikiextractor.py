"""``wikiextractor``: ``<doc id url title>`` ... ``</doc>`` blocks (WikiExtractor's output); the first line is the
title (not a sentence) and is skipped; then one paragraph per line. A document's id is ``name:offset`` of its
``<doc>`` line; its ``id`` and ``title`` attributes are kept. Lines outside a block and blocks left open are
counted."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import Line, parser_view, record_too_big
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.documents import Document

SPLITS = True
WIKI_OPEN = re.compile(r"^<doc\b[^>]*>\s*$")
# WikiExtractor writes `<doc id="%s" url="%s" title="%s">` unescaped: a title may hold quotes, and is last.
_WIKI_ID = re.compile(r'\bid="([^"]*)"')
_WIKI_TITLE = re.compile(r'\btitle="(.*)"\s*>\s*$')
_WIKI_LINE = re.compile(r"^<doc\b[^>]*>$|^</doc>$")


def anchor(raw: bytes) -> bool:
    """A ``<doc ...>`` line: the parser starts a document there whatever came before (an unclosed document
    is counted and yielded, as the end of input does)."""
    return b"<" in raw and bool(WIKI_OPEN.match(parser_view(raw)))


def detect(sample: Sample) -> str | None:
    """Any ``<doc ...>`` or ``</doc>`` line."""
    wiki = sum(bool(_WIKI_LINE.match(s)) for s in sample.full)
    return f"{wiki} <doc>/</doc> lines" if wiki else None


def _wiki_doc(doc_id: str, open_tag: str) -> Document:
    """A document of a ``<doc id=".." url=".." title="..">`` line, with its title and id."""
    page_id, title = _WIKI_ID.search(open_tag), _WIKI_TITLE.search(open_tag)
    return Document(doc_id, [], title=title.group(1) if title else "", source_id=page_id.group(1) if page_id else "")


def parse(
    lines: Iterable[Line], name: str, counters: Counter, strip_gutenberg: bool = True, text_field: str = "text"
) -> Iterator[Document]:
    doc: Document | None = None
    expect_title = False
    held, cap = 0, limits.MAX_RECORD_BYTES  # characters of the document so far: past the cap, refused
    for offset, line in lines:
        s = line.strip()
        if doc is None:
            if s.startswith("<doc") and WIKI_OPEN.match(s):
                doc, held = _wiki_doc(f"{name}:{offset}", s), 0
                expect_title = True
            elif s:
                counters[C.LINES_OUTSIDE_DOC] += 1
            continue
        if s == "</doc>":
            yield doc
            doc = None
            continue
        if s.startswith("<doc") and WIKI_OPEN.match(s):  # the regex only where it can match: ~5x cheaper
            counters[C.UNCLOSED_DOC] += 1  # a <doc> without </doc>: keep what we have, start anew
            yield doc
            doc, held = _wiki_doc(f"{name}:{offset}", s), 0
            expect_title = True
            continue
        if not s:
            continue
        if expect_title:
            expect_title = False  # the title line is not a sentence
            continue
        doc.paragraphs.append(s)
        held += len(s) + 1
        if held > cap:
            raise record_too_big(name, f"the <doc> at byte {doc.doc_id.rpartition(':')[2]}", cap)
    if doc is not None:
        counters[C.UNCLOSED_DOC] += 1
        yield doc
