"""``--format auto``: which text layout an input is in, judged from the first 64 KB of its first files.

The layouts differ in what a line is: a ``<doc ...>`` line marks ``wikiextractor``, JSON objects ``jsonl``; among
plain text, lines that end mid-sentence are hard-wrapped prose (``text``), lines that each hold one sentence are
``sentences``, and lines that hold several sentences are paragraphs: ``text`` when blank lines separate them, a
document each (``lines``) when none does. A file judged wrongly trains on garbage with exit 0 (a paragraph read
as one "sentence", ``</doc>`` lines as text), so the choice is said in one line with its evidence, and inputs
whose first files disagree are refused, not guessed.

Each format's module says what its evidence is (``detect``); this module samples a file once (:class:`Sample`)
and asks the formats in the table's ``DETECTION_ORDER``: formats of records by their magic bytes first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import read_chunks
from bertstream.pipelines.inputs.formats import DETECTION_ORDER, LINE_FORMATS, format_module

SAMPLE_BYTES = 64 << 10
SAMPLED_FILES = 3  # per --input pattern

# A sentence ends inside the line: "... end. Next", "... 结束。下" (a following closing quote stays with its sentence)
_INNER_END = re.compile(r"[.!?][\"'”’)\]]*\s+[\"'“‘(\[]?[A-Z0-9]|[。！？][”’」』）]*[^\s”’」』）]")
_ENDS = re.compile(r"[.!?:;。！？][\"'”’)\]」』）]*$")


@dataclass(frozen=True, slots=True)
class Detected:
    format: str
    why: str  # the evidence, in words


class Sample:
    """What the formats judge a file by: its first bytes (decompressed), and its first lines with what they tell
    of plain text, each worked out once, when a format first asks."""

    def __init__(self, head: bytes = b"", lines: Sequence[str] | None = None) -> None:
        self.head = head
        self._lines = lines

    @cached_property
    def lines(self) -> list[str]:
        """The lines, stripped (a last, possibly cut, line already left out)."""
        return [s.strip() for s in (self._lines if self._lines is not None else _lines_of(self.head, SAMPLE_BYTES))]

    @cached_property
    def full(self) -> list[str]:
        """The lines that hold text."""
        return [s for s in self.lines if s]

    @property
    def blank(self) -> int:
        return len(self.lines) - len(self.full)

    @cached_property
    def ends(self) -> int:
        """Lines that end as a sentence does."""
        return sum(bool(_ENDS.search(s)) for s in self.full)

    @cached_property
    def several(self) -> int:
        """Lines in which a sentence ends and another starts."""
        return sum(bool(_INNER_END.search(s)) for s in self.full)


def _judged(sample: Sample, names: Sequence[str]) -> Detected | None:
    """The first of ``names`` (in :data:`DETECTION_ORDER`) whose module finds its evidence in the sample."""
    for name in DETECTION_ORDER:
        if name in names:
            why = format_module(name).detect(sample)
            if why is not None:
                return Detected(name, why)
    return None


def detect_lines(lines: Sequence[str]) -> Detected:
    """The layout of a file from its first lines (a last, possibly cut, line already left out)."""
    found = _judged(Sample(lines=lines), LINE_FORMATS)
    assert found is not None  # sentences takes whatever is left
    return found


def detect_records(head: bytes) -> Detected | None:
    """Formats of records, known by their first bytes (a dump decompressed): Parquet, Arrow, a MediaWiki export."""
    return _judged(Sample(head, lines=()), [n for n in DETECTION_ORDER if n not in LINE_FORMATS])


def sample_head(path: str, limit: int = SAMPLE_BYTES) -> bytes:
    """A file's first ``limit`` bytes, decompressed."""
    chunks = read_chunks(path, limit)
    try:
        return next(chunks, b"")[:limit]
    finally:
        chunks.close()


def _lines_of(head: bytes, limit: int) -> list[str]:
    whole = len(head) < limit
    lines = head.decode("utf-8", errors="replace").splitlines()
    return lines if whole or len(lines) < 2 else lines[:-1]


def sample_lines(path: str, limit: int = SAMPLE_BYTES, head: bytes | None = None) -> list[str]:
    """The first lines of a file (decompressed), the last one left out when the sample cuts it."""
    return _lines_of(sample_head(path, limit) if head is None else head, limit)


def detect_file(path: str) -> Detected:
    """One file's format: a format of records by its first bytes, else a text layout by its first lines."""
    found = _judged(Sample(sample_head(path)), DETECTION_ORDER)
    assert found is not None  # sentences takes whatever is left
    return found


def detect_files(pattern: str, paths: Sequence[str]) -> Detected:
    """The layout of the files one ``--input`` matched, from the first few; one that disagrees is refused."""
    seen = [(p, detect_file(p)) for p in list(paths)[:SAMPLED_FILES]]
    kinds = {d.format for _, d in seen}
    if len(kinds) > 1:
        shown = ", ".join(f"{p} looks like {d.format} ({d.why})" for p, d in seen)
        raise UsageError(
            "input_format", f"--format auto cannot tell the layout of {pattern!r}: {shown}; give --format (or a prefix)"
        )
    return seen[0][1]
