"""The read stage's line formats: lines -> documents, one parser per format (``sentences``, ``wikiextractor``,
``text``, ``jsonl``, ``lines``; :mod:`bertstream.pipelines.pretraining.read` has what each is, and reads the
lines; :mod:`bertstream.pipelines.pretraining.records` the formats of records). Pure functions over
``(offset, line)`` pairs: ids are ``path:offset``, and every line dropped is counted."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import Line
from bertstream.pipelines.pretraining.documents import Document, text_paragraphs

_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
WIKI_OPEN = re.compile(r"^<doc\b[^>]*>\s*$")
# WikiExtractor writes `<doc id="%s" url="%s" title="%s">` unescaped: a title may hold quotes, and is last.
_WIKI_ID = re.compile(r'\bid="([^"]*)"')
_WIKI_TITLE = re.compile(r'\btitle="(.*)"\s*>\s*$')


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


def _wiki_doc(doc_id: str, open_tag: str) -> Document:
    """A document of a ``<doc id=".." url=".." title="..">`` line, with its title and id."""
    page_id, title = _WIKI_ID.search(open_tag), _WIKI_TITLE.search(open_tag)
    return Document(doc_id, [], title=title.group(1) if title else "", source_id=page_id.group(1) if page_id else "")


def parse_wikiextractor(lines: Iterable[Line], path: str, counters: Counter) -> Iterator[Document]:
    doc: Document | None = None
    expect_title = False
    for offset, line in lines:
        s = line.strip()
        if doc is None:
            if s.startswith("<doc") and WIKI_OPEN.match(s):
                doc = _wiki_doc(f"{path}:{offset}", s)
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
            doc = _wiki_doc(f"{path}:{offset}", s)
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


def parse_jsonl(lines: Iterable[Line], path: str, counters: Counter, text_field: str = "text") -> Iterator[Document]:
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
        text = obj.get(text_field) if isinstance(obj, dict) else None
        if not isinstance(text, str):  # "text": 5 is no missing field: each its own reason
            present = isinstance(obj, dict) and text_field in obj
            counters[C.drop(C.TEXT_NOT_STRING if present else C.MISSING_TEXT)] += 1
            counters[C.DOCUMENTS_READ] += 1
            continue
        # Newlines inside the JSON string are paragraph breaks; clean them as lines.
        title, source_id = obj.get("title"), obj.get("id")
        yield Document(
            f"{path}:{offset}",
            text_paragraphs(text, counters),
            title=title if isinstance(title, str) else "",
            source_id=str(source_id) if isinstance(source_id, str | int) and not isinstance(source_id, bool) else "",
        )


def parse(
    lines: Iterable[Line],
    path: str,
    input_format: str,
    counters: Counter,
    strip_gutenberg: bool = True,
    text_field: str = "text",
) -> Iterator[Document]:
    if input_format == "sentences":
        return parse_sentences(lines, path)
    if input_format == "wikiextractor":
        return parse_wikiextractor(lines, path, counters)
    if input_format == "text":
        return parse_text(lines, path, counters, strip_gutenberg)
    if input_format == "jsonl":
        return parse_jsonl(lines, path, counters, text_field)
    if input_format == "lines":
        return parse_lines(lines, path)
    raise ValueError(f"unknown input format {input_format!r}")
