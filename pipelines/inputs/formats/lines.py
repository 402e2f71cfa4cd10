"""``lines``: one document per line, a paragraph to segment (CLUECorpusSmall's layout); blank lines skipped. A
document's id is ``name:offset`` of its line."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from bertstream.pipelines.common.files import Line
from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.documents import Document

SPLITS = True
anchor = None  # every line stands alone


def detect(sample: Sample) -> str | None:
    """Lines that hold several sentences each, no blank lines between them (asked after ``text``, which takes
    such lines with blank lines between them, and Gutenberg's books)."""
    n = len(sample.full)
    if n and sample.ends >= 0.5 * n and sample.several >= 0.3 * n and sample.blank < 0.5 * (n - 1):
        return f"{sample.several} of {n} lines hold several sentences, no blank lines: a document a line"
    return None


def parse(
    lines: Iterable[Line], name: str, counters: Counter, strip_gutenberg: bool = True, text_field: str = "text"
) -> Iterator[Document]:
    for offset, line in lines:
        s = line.strip()
        if s:
            yield Document(f"{name}:{offset}", [s])
