"""``--format auto``: which text layout an input is in, judged from the first 64 KB of its first files (more when
they hold fewer than ``SAMPLE_LINES`` whole lines: records of JSON lines may be books).

The layouts differ in what a line is: a ``<doc ...>`` line marks ``wikiextractor``, JSON objects ``jsonl``; among
plain text, lines that end mid-sentence are hard-wrapped prose (``text``), lines that each hold one sentence are
``sentences``, and lines that hold several sentences are paragraphs: ``text`` when blank lines separate them, a
document each (``lines``) when none does. A file judged wrongly trains on garbage with exit 0 (a paragraph read
as one "sentence", ``</doc>`` lines as text), so the choice is said in one line with its evidence, and inputs
whose first files disagree are refused, not guessed. So is a file whose evidence disagrees or falls short (JSON
lines that do not parse, no whole line within ``MAX_SAMPLE_BYTES``), and one that is no plain text at all (binary,
HTML or XML markup, a JSON document): auto never makes training text of it; ``--format`` still can.

Each format's module says what its evidence is (``detect``); this module samples a file once (:class:`Sample`)
and asks the formats in the table's ``DETECTION_ORDER``: formats of records by their magic bytes first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import COMPRESSED_SUFFIXES, read_chunks
from bertstream.pipelines.inputs.formats import (
    DETECTION_ORDER,
    LINE_FORMATS,
    PLAIN_TEXT_FORMATS,
    claimed_by,
    format_module,
)

SAMPLE_BYTES = 64 << 10
SAMPLE_LINES = 8  # whole lines a sample holds at least, read further when the first SAMPLE_BYTES hold fewer
MAX_SAMPLE_BYTES = 16 << 20  # ... but no further than this
SAMPLED_FILES = 3  # per --input pattern
NOT_TEXT_SHARE = 0.01  # NUL, control and invalid UTF-8 bytes in a sample: more is binary

# A sentence ends inside the line: "... end. Next", "... 结束。下" (a following closing quote stays with its sentence)
_INNER_END = re.compile(r"[.!?][\"'”’)\]]*\s+[\"'“‘(\[]?[A-Z0-9]|[。！？][”’」』）]*[^\s”’」』）]")
_ENDS = re.compile(r"[.!?:;。！？][\"'”’)\]」』）]*$")
_NOT_TEXT = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")
_MARKUP_START = re.compile(r"<(\?xml|!doctype|html)\b", re.IGNORECASE)
_TAG = re.compile(r"</?[A-Za-z][\w:.-]*(\s[^>]*)?/?>")  # a line that starts with one: markup
_JSON_START = re.compile(r"[\[{]\s*([\"\[{]|$)")  # "[", "{", '[{"', '{"': a JSON document starts so


class Undecided(ValueError):
    """The evidence in a sample disagrees or falls short: a format is to be given, not guessed."""


@dataclass(frozen=True, slots=True)
class Detected:
    format: str
    why: str  # the evidence, in words


class Sample:
    """What the formats judge a file by: its first bytes (decompressed), and its first lines with what they tell
    of plain text, each worked out once, when a format first asks."""

    def __init__(self, head: bytes = b"", lines: Sequence[str] | None = None, whole: bool | None = None) -> None:
        self.head = head
        self._lines = lines
        self.whole = len(head) < SAMPLE_BYTES if whole is None else whole  # the file's every byte

    @cached_property
    def lines(self) -> list[str]:
        """The lines, stripped (a last, possibly cut, line already left out)."""
        return [s.strip() for s in (self._lines if self._lines is not None else _lines_of(self.head, self.whole))]

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


def _not_plain_text(sample: Sample) -> str | None:
    """Why a sample no format claimed by its magic bytes or markup is no plain text (binary, HTML or XML markup,
    a JSON document), else None: the layouts of plain text would take any of these as training text."""
    raw, full = sample.head, sample.full
    if raw:
        bad = len(_NOT_TEXT.findall(raw)) + raw.decode("utf-8", errors="replace").count("\ufffd")
        bad -= raw.count(b"\xef\xbf\xbd")  # U+FFFD in valid UTF-8 is text
        if bad > NOT_TEXT_SHARE * len(raw):
            return f"{bad} of its first {len(raw)} bytes are NUL, control characters or not UTF-8: binary, not text"
    if not full:
        return None
    if _MARKUP_START.match(full[0]):
        return f"it starts as HTML or XML markup ({full[0][:20]!r})"
    tags = sum(bool(_TAG.match(s)) for s in full)
    if tags >= 0.3 * len(full):
        return f"{tags} of {len(full)} lines start with a tag: HTML or XML markup"
    if _JSON_START.match(full[0]):
        return f"it starts as a JSON document ({full[0][:20]!r}), not one JSON object a line (jsonl)"
    return None


def _judged(sample: Sample, names: Sequence[str]) -> Detected | None:
    """The first of ``names`` (in :data:`DETECTION_ORDER`) whose module finds its evidence in the sample; before
    the layouts of plain text, a sample that is none is refused (:class:`Undecided`)."""
    plain_checked = False
    for name in DETECTION_ORDER:
        if name in names:
            if name in PLAIN_TEXT_FORMATS and not plain_checked:
                plain_checked, problem = True, _not_plain_text(sample)
                if problem is not None:
                    raise Undecided(problem)
            why = format_module(name).detect(sample)
            if why is not None:
                return Detected(name, why)
    return None


def detect_lines(lines: Sequence[str]) -> Detected:
    """The layout of a file from its first lines (a last, possibly cut, line already left out)."""
    found = _judged(Sample(lines=lines), LINE_FORMATS)
    assert found is not None  # sentences takes whatever is left
    return found


def read_sample(path: str) -> tuple[bytes, bool]:
    """A file's first ``SAMPLE_BYTES``, decompressed; more, up to ``MAX_SAMPLE_BYTES``, until ``SAMPLE_LINES``
    whole lines are in (or the file ends). And whether that is the whole file."""
    chunks = read_chunks(path, SAMPLE_BYTES)
    parts: list[bytes] = []  # joined once: adding each chunk to the whole, and counting its lines again, was
    size = newlines = 0  # quadratic up to MAX_SAMPLE_BYTES
    try:
        for chunk in chunks:
            parts.append(chunk)
            size += len(chunk)
            newlines += chunk.count(b"\n")
            if size < SAMPLE_BYTES:
                continue
            if size - len(chunk) < SAMPLE_BYTES:  # the first SAMPLE_BYTES just came in
                got = b"".join(parts)
                parts = [got]
                if got.count(b"\n", 0, SAMPLE_BYTES) >= SAMPLE_LINES:
                    return got[:SAMPLE_BYTES], False  # as it always was: the first 64 KB
            if newlines >= SAMPLE_LINES or size >= MAX_SAMPLE_BYTES:
                return b"".join(parts)[:MAX_SAMPLE_BYTES], False
        return b"".join(parts), True
    finally:
        chunks.close()


def _lines_of(head: bytes, whole: bool) -> list[str]:
    lines = head.decode("utf-8", errors="replace").splitlines()
    return lines if whole or len(lines) < 2 else lines[:-1]


def sample_lines(path: str) -> list[str]:
    """The first lines of a file (decompressed), the last one left out when the sample cuts it."""
    return _lines_of(*read_sample(path))


def detect_file(path: str) -> Detected:
    """One file's format: the format that claims its name's ending, else a format of records by its first bytes,
    else a text layout by its first lines; a
    sample that is no text, whose evidence disagrees or that holds no whole line is :class:`Undecided`."""
    claimed = claimed_by(path, COMPRESSED_SUFFIXES)
    if claimed is not None:  # a table's lines would be taken as text, separators, header and labels included
        return Detected(claimed[0], f"its name ends {claimed[1]}")
    head, whole = read_sample(path)
    if not whole and b"\n" not in head:
        raise Undecided(f"no whole line in its first {len(head)} bytes")
    found = _judged(Sample(head, whole=whole), DETECTION_ORDER)
    assert found is not None  # sentences takes whatever is left
    return found


def detect_files(pattern: str, paths: Sequence[str]) -> Detected:
    """The layout of the files one ``--input`` matched, from the first few; one that disagrees is refused."""
    seen = []
    for p in list(paths)[:SAMPLED_FILES]:
        try:
            seen.append((p, detect_file(p)))
        except Undecided as e:
            raise UsageError(
                "input_format", f"--format auto cannot tell the layout of {p!r}: {e}; give --format (or a prefix)"
            ) from None
    kinds = {d.format for _, d in seen}
    if len(kinds) > 1:
        shown = ", ".join(f"{p} looks like {d.format} ({d.why})" for p, d in seen)
        raise UsageError(
            "input_format", f"--format auto cannot tell the layout of {pattern!r}: {shown}; give --format (or a prefix)"
        )
    return seen[0][1]
