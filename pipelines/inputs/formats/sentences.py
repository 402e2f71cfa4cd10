"""``sentences``: one sentence per line, a blank line between documents (BERT's own input). A document's id is
``name:offset`` of its first line; its lines are finished sentences (``presegmented``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator

from bertstream.pipelines.common.files import Line, parser_view, record_too_big
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.documents import Document

SPLITS = True
_VISIBLE_ASCII_BEFORE_CR = re.compile(rb"[^\r!-~]*[!-~]")


def anchor(raw: bytes) -> bool:
    """A blank line: it ends the document before it, as the end of input does, and starts none."""
    if _VISIBLE_ASCII_BEFORE_CR.match(raw):  # shortcut: such a byte decodes to itself and survives cleaning
        return False
    return not parser_view(raw)


def detect(sample: Sample) -> str:
    """Whatever no other format claims: plain text whose lines each hold one sentence."""
    if not sample.full:
        return "no text in the sample"
    n = len(sample.full)
    return f"{n - sample.several} of {n} lines are one sentence, {sample.blank} blank lines between documents"


def parse(
    lines: Iterable[Line], name: str, counters: Counter, strip_gutenberg: bool = True, text_field: str = "text"
) -> Iterator[Document]:
    doc: Document | None = None
    held, cap = 0, limits.MAX_RECORD_BYTES  # characters of the document so far: past the cap, refused
    for offset, line in lines:
        s = line.strip()
        if not s:
            if doc is not None:
                yield doc
                doc = None
            continue
        if doc is None:
            doc, held = Document(f"{name}:{offset}", [], presegmented=True), 0
        doc.paragraphs.append(s)
        held += len(s) + 1
        if held > cap:
            raise record_too_big(name, f"the document at byte {doc.doc_id.rpartition(':')[2]}", cap)
    if doc is not None:
        yield doc
