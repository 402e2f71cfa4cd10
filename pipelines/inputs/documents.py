"""What the read stage yields, whatever the input format: documents before segmentation, in batches with the
counters of reading them (:mod:`bertstream.pipelines.inputs.read` makes them, every later stage and
``bertprep extract`` take them)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from bertstream.pipelines.common.files import clean_line

_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(slots=True)
class Document:
    """A document before segmentation.

    ``paragraphs`` hold text to segment, or finished sentences when ``presegmented`` (``sentences`` format).
    ``doc_id`` is the pipeline's id (``name:offset``, ``name:page_id``, ``name:row``: unique across the run's
    inputs, stable); ``title`` and ``source_id`` are what the source itself calls the document (a page's title
    and id, a record's ``title`` and ``id`` fields), empty where the format has none. Only ``bertprep extract``
    writes them: they shape no shard.
    """

    doc_id: str
    paragraphs: list[str]
    presegmented: bool = False
    title: str = ""
    source_id: str = ""


@dataclass(slots=True)
class DocumentBatch:
    """Documents of one file (or part of one), with the counters of reading them."""

    documents: list[Document]
    counters: Counter = field(default_factory=Counter)


def text_paragraphs(text: str, counters: Counter) -> list[str]:
    """A record's text field (JSON lines, Parquet, Arrow) as paragraphs: newlines inside it are paragraph
    breaks; each is cleaned as a line (control characters counted) and stripped, blank ones go."""
    return [p for p in (clean_line(x, counters).strip() for x in _NEWLINE.split(text)) if p]
