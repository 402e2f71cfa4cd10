"""``--format auto``: which text layout an input is in, judged from the first 64 KB of its first files.

The layouts differ in what a line is: a ``<doc ...>`` line marks ``wikiextractor``, JSON objects ``jsonl``; among
plain text, lines that end mid-sentence are hard-wrapped prose (``text``), lines that each hold one sentence are
``sentences``, and lines that hold several sentences are paragraphs: ``text`` when blank lines separate them, a
document each (``lines``) when none does. A file judged wrongly trains on garbage with exit 0 (a paragraph read
as one "sentence", ``</doc>`` lines as text), so the choice is said in one line with its evidence, and inputs
whose first files disagree are refused, not guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import read_chunks

SAMPLE_BYTES = 64 << 10
SAMPLED_FILES = 3  # per --input pattern

_WIKI_LINE = re.compile(r"^<doc\b[^>]*>$|^</doc>$")
_GUTENBERG = re.compile(r"^\*\*\*\s*(START|END) OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
# A sentence ends inside the line: "... end. Next", "... 结束。下" (a following closing quote stays with its sentence)
_INNER_END = re.compile(r"[.!?][\"'”’)\]]*\s+[\"'“‘(\[]?[A-Z0-9]|[。！？][”’」』）]*[^\s”’」』）]")
_MEDIAWIKI = re.compile(rb"<mediawiki[\s>]")  # the export's root element, after any <?xml ...?> declaration
_ENDS = re.compile(r"[.!?:;。！？][\"'”’)\]」』）]*$")


@dataclass(frozen=True, slots=True)
class Detected:
    format: str
    why: str  # the evidence, in words


def detect_lines(lines: Sequence[str]) -> Detected:
    """The layout of a file from its first lines (a last, possibly cut, line already left out)."""
    text = [s.strip() for s in lines]
    full = [s for s in text if s]
    if not full:
        return Detected("sentences", "no text in the sample")
    wiki = sum(bool(_WIKI_LINE.match(s)) for s in full)
    if wiki:
        return Detected("wikiextractor", f"{wiki} <doc>/</doc> lines")
    objects = sum(s[0] == "{" and _is_object(s) for s in full)
    if objects >= 0.9 * len(full):
        return Detected("jsonl", f"{objects} of {len(full)} lines are JSON objects")
    if any(_GUTENBERG.match(s) for s in full):
        return Detected("text", "a Project Gutenberg marker")
    n, blank = len(full), len(text) - len(full)
    ends = sum(bool(_ENDS.search(s)) for s in full)
    several = sum(bool(_INNER_END.search(s)) for s in full)
    if ends < 0.5 * n:
        return Detected("text", f"{n - ends} of {n} lines end mid-sentence: hard-wrapped paragraphs")
    if several >= 0.3 * n:
        if blank >= 0.5 * (n - 1):
            return Detected("text", f"{several} of {n} lines hold several sentences, blank lines between them")
        return Detected("lines", f"{several} of {n} lines hold several sentences, no blank lines: a document a line")
    return Detected("sentences", f"{n - several} of {n} lines are one sentence, {blank} blank lines between documents")


def _is_object(s: str) -> bool:
    try:
        return isinstance(json.loads(s), dict)
    except json.JSONDecodeError:
        return False


def detect_records(head: bytes) -> Detected | None:
    """Formats of records, known by their first bytes (a dump decompressed): Parquet, Arrow, a MediaWiki export."""
    if head.startswith(b"PAR1"):
        return Detected("parquet", "Parquet's magic bytes")
    if head.startswith(b"ARROW1"):
        return Detected("arrow", "an Arrow IPC file's magic bytes")
    if head.startswith(b"\xff\xff\xff\xff"):
        return Detected("arrow", "an Arrow IPC stream's first message")
    if _MEDIAWIKI.search(head[:8192]):
        return Detected("mediawiki", "a <mediawiki> export's root element")
    return None


def sample_head(path: str, limit: int = SAMPLE_BYTES) -> bytes:
    """A file's first ``limit`` bytes, decompressed."""
    chunks = read_chunks(path, limit)
    try:
        return next(chunks, b"")[:limit]
    finally:
        chunks.close()


def sample_lines(path: str, limit: int = SAMPLE_BYTES, head: bytes | None = None) -> list[str]:
    """The first lines of a file (decompressed), the last one left out when the sample cuts it."""
    head = sample_head(path, limit) if head is None else head
    whole = len(head) < limit
    lines = head.decode("utf-8", errors="replace").splitlines()
    return lines if whole or len(lines) < 2 else lines[:-1]


def detect_file(path: str) -> Detected:
    """One file's format: a format of records by its first bytes, else a text layout by its first lines."""
    head = sample_head(path)
    return detect_records(head) or detect_lines(sample_lines(path, head=head))


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
