"""``jsonl``: one JSON object per line, its text in a string field (``--text-field``, default ``text``; newlines
in it are paragraph breaks), its ``id`` and ``title`` kept where present. A document's id is ``name:offset`` of
its line. A line that is no JSON, or has no string text, is a counted drop."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import Line
from bertstream.pipelines.inputs.detect import Sample, Undecided
from bertstream.pipelines.inputs.documents import Document, text_paragraphs
from bertstream.schemas import json_text

SPLITS = True
anchor = None  # every line stands alone


def detect(sample: Sample) -> str | None:
    """Nine lines in ten or more are JSON objects. Half or more that start as one, but fewer that parse, is
    evidence that disagrees (lines cut short?): :class:`Undecided`, not text."""
    full = sample.full
    objects = sum(s[0] == "{" and _is_object(s) for s in full)
    if full and objects >= 0.9 * len(full):
        return f"{objects} of {len(full)} lines are JSON objects"
    braces = sum(s[0] == "{" for s in full)
    if full and braces >= 0.5 * len(full):
        raise Undecided(
            f"{objects} of {len(full)} lines are JSON objects and {braces - objects} more start with {{ but do not "
            "parse (cut short?): jsonl reads the objects and drops the rest, counted"
        )
    return None


def _is_object(s: str) -> bool:
    try:
        return isinstance(json_text.loads(s), dict)
    except json.JSONDecodeError:
        return False


def parse(
    lines: Iterable[Line], name: str, counters: Counter, strip_gutenberg: bool = True, text_field: str = "text"
) -> Iterator[Document]:
    for offset, line in lines:
        s = line.strip()
        if not s:
            continue
        try:
            obj = json_text.loads(s)
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
            f"{name}:{offset}",
            text_paragraphs(text, counters),
            title=title if isinstance(title, str) else "",
            source_id=str(source_id) if isinstance(source_id, str | int) and not isinstance(source_id, bool) else "",
        )
