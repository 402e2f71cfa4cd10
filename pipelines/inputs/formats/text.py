"""``text``: a file is one document (a book); paragraphs are separated by blank lines and hard-wrapped lines are
joined. Project Gutenberg header and licence are cut at their ``*** START/END OF`` markers (the cut lines
counted); a file of several Gutenberg books gives one document per book. A file is read whole, by one worker:
its document's id is its name."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import Line, record_too_big
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.documents import Document

SPLITS = False  # a book has no line a range could start at
anchor = None
_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)


def detect(sample: Sample) -> str | None:
    """A Gutenberg marker; else lines of prose that end mid-sentence (hard-wrapped), or that hold several
    sentences with blank lines between them (paragraphs)."""
    full = sample.full
    if not full:
        return None
    if any(_GUTENBERG_START.match(s) or _GUTENBERG_END.match(s) for s in full):
        return "a Project Gutenberg marker"
    n = len(full)
    if sample.ends < 0.5 * n:
        return f"{n - sample.ends} of {n} lines end mid-sentence: hard-wrapped paragraphs"
    if sample.several >= 0.3 * n and sample.blank >= 0.5 * (n - 1):
        return f"{sample.several} of {n} lines hold several sentences, blank lines between them"
    return None


def parse(
    lines: Iterable[Line], name: str, counters: Counter, strip_gutenberg: bool = True, text_field: str = "text"
) -> Iterator[Document]:
    """One document per book. A file may hold several Gutenberg books: each ``*** START`` after an ``*** END``
    starts another book (id ``name:offset`` of its START line; the first keeps the id ``name``). Header and
    licence lines cut at the markers are counted, never dropped silently. A book past ``MAX_RECORD_BYTES`` of
    text is refused, named."""
    paragraphs: list[str] = []
    current: list[str] = []
    doc_id, kept = name, 0  # kept: non-blank lines of the book so far
    after_end, yielded = False, False
    held, cap = 0, limits.MAX_RECORD_BYTES  # characters of the book so far (a character is a byte or more)
    for offset, line in lines:
        s = line.strip()
        # A marker line starts with "***" (``s`` is stripped): the two regexes only run on such lines.
        marker = strip_gutenberg and s.startswith("***")
        if marker and _GUTENBERG_START.match(s):
            counters[C.GUTENBERG_STRIPPED] += 1
            # Lines before a START marker are the header: they go, counted.
            counters[C.GUTENBERG_LINES_STRIPPED] += kept
            if after_end:
                doc_id, after_end = f"{name}:{offset}", False
            paragraphs, current, kept, held = [], [], 0, 0
            continue
        if after_end:
            counters[C.GUTENBERG_LINES_STRIPPED] += bool(s)  # the licence, or text of no book
            continue
        if marker and _GUTENBERG_END.match(s):
            counters[C.GUTENBERG_LINES_STRIPPED] += 1  # the marker itself
            if current:
                paragraphs.append(" ".join(current))
            yield Document(doc_id, paragraphs)
            yielded, after_end, paragraphs, current, kept, held = True, True, [], [], 0, 0
            continue
        if s:
            current.append(s)
            kept += 1
            held += len(s) + 1
            if held > cap:
                raise record_too_big(name, f"the book {doc_id!r}", cap)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if not after_end and (kept or not yielded):
        if current:
            paragraphs.append(" ".join(current))
        yield Document(doc_id, paragraphs)
