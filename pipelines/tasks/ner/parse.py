"""CoNLL-2003 files (``token POS chunk TAG``) and two-column files (``char TAG``, Chinese NER such as
People's Daily) -> ``Sentence`` records with IOB2 tags (NER).

``parse_conll`` reads one file; ``looks_like_conll`` checks a file before the pipeline starts;
``ConllParser`` is the parser ``ReadRecords`` runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.counters import Tally, drop, reason
from bertstream.pipelines.common.files import InputError, read_chunks
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.byte_ranges import iter_text_lines
from bertstream.pipelines.tasks.read import file_lines, where

UNIT = "sentences"  # the kind's unit (``KIND.unit``): what one record is, as the counters name it

# The kind's own drop reasons: a sentence with a malformed line
# (``<unit>_dropped.malformed_line``); per line, under ``lines_malformed.<reason>``, a line without the format's
# field count.
MALFORMED_LINE = reason("malformed_line", (UNIT,), "a sentence with a malformed line")
WRONG_FIELD_COUNT = reason(
    "wrong_field_count",
    (UNIT,),
    "a line with another number of fields than its format (counted per line as lines_malformed.<reason>)",
)
TAG_NOT_IN_SET = reason("tag_not_in_set", (UNIT,), "a tag outside the dataset's tag set")

_BIO_TAG = re.compile(r"^(O|[BI]-\S+)$")
# Fields per token line of each input format; the token is the first field, the tag the last.
NER_FORMATS = {"conll": 4, "char-tag": 2}
_SHAPES = {"conll": "four fields 'token POS chunk TAG'", "char-tag": "two fields 'char TAG'"}
_NAMES = {"conll": "CoNLL", "char-tag": "char-tag"}


@dataclass(slots=True)
class Sentence:
    """One CoNLL sentence (IOB2 tags) starting at ``line``."""

    line: int
    words: list[str]
    tags: list[str]

    def size(self) -> int:
        return sum(len(w) for w in self.words)

    def label_names(self) -> Iterable[str]:
        return self.tags


def _shaped(lines: list[str], n_fields: int) -> int:
    """How many of ``lines`` have ``n_fields`` fields, the last a BIO tag."""
    return sum(len(f) == n_fields and bool(_BIO_TAG.match(f[-1])) for f in (s.split() for s in lines))


def looks_like_conll(path: str, sample_lines: int = 200, input_format: str = "conll") -> None:
    """Before the pipeline starts: a usage error unless most of the first content lines have the format's
    field count (four for CoNLL, two for ``char TAG``); a file of the other format is named as such."""
    lines = [
        s
        for s in (
            x.strip()
            for x in islice(
                iter_text_lines(read_chunks(path, 1 << 16), Tally().counts, limits.MAX_RECORD_BYTES, path), 5000
            )
        )
        if s and not s.startswith("-DOCSTART-")
    ][:sample_lines]
    if not lines:
        raise UsageError("input", f"{path}: holds no CoNLL token line")
    good = sum(len(s.split()) == NER_FORMATS[input_format] for s in lines)
    if good * 2 < len(lines):
        other = next((f for f, n in NER_FORMATS.items() if _shaped(lines, n) * 2 >= len(lines)), None)
        hint = f"; it looks like --format {other}" if other else ""
        raise UsageError(
            "input",
            f"{path}: not a {_NAMES[input_format]} file: {len(lines) - good} of its first {len(lines)} token "
            f"lines do not have {_SHAPES[input_format]} (e.g. {lines[0][:80]!r}){hint}",
        )


def iob1_to_iob2(tags: list[str]) -> tuple[list[str], int]:
    """IOB1 (I- starts an entity unless it follows the same type; B- only between two) -> IOB2 (B- starts
    every entity). Returns the tags and how many changed."""
    out, changed, prev = [], 0, "O"
    for tag in tags:
        if tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:]):
            tag = "B-" + tag[2:]
            changed += 1
        out.append(tag)
        prev = tag
    return out, changed


def invalid_iob2(tags: list[str]) -> list[int]:
    """Positions of ``I-X`` tags that do not continue a ``B-X``/``I-X`` (kept as given, counted)."""
    bad, prev = [], "O"
    for i, tag in enumerate(tags):
        if tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:]):
            bad.append(i)
        prev = tag
    return bad


def parse_conll(
    lines: Iterable[str], path: str, file_index: int, scheme: str, tally: Tally, input_format: str = "conll"
) -> Iterator[Sentence]:
    """Sentences of a CoNLL-2003 file (``token POS chunk TAG``; blank lines and ``-DOCSTART-`` separate), or of
    a ``char-tag`` file (``char TAG``: one character per line, Chinese NER).

    A line without the format's field count or with a tag that is not ``O``/``B-X``/``I-X`` drops its whole sentence
    (a sentence missing a word would misalign every later prediction); both are counted with line numbers.
    """
    unit = UNIT
    n_fields = NER_FORMATS[input_format]
    words: list[str] = []
    tags: list[str] = []
    start, bad, content_lines, bad_lines = 0, False, 0, 0

    def finish() -> Iterator[Sentence]:
        tally.add(f"{unit}_read")
        if bad:
            tally.note(drop(MALFORMED_LINE, unit), file_index, start, where(path, start))
            return
        out = tags
        if scheme == "iob1":
            out, changed = iob1_to_iob2(tags)
            tally.add("tags_converted_iob1_to_iob2", changed)
        for i in invalid_iob2(out):
            tally.note("invalid_iob2_transitions", file_index, start + i, where(path, start + i))
        yield Sentence(start, words, out)

    for n, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("-DOCSTART-"):
            if s:
                tally.add("docstart_lines")
            if words or bad:
                yield from finish()
            words, tags, bad = [], [], False
            continue
        content_lines += 1
        if not words and not bad:
            start = n
        fields = s.split()
        if len(fields) != n_fields:
            tally.note(f"lines_malformed.{WRONG_FIELD_COUNT}", file_index, n, where(path, n))
            bad, bad_lines = True, bad_lines + 1
            continue
        if not _BIO_TAG.match(fields[-1]):
            tally.note("lines_malformed.bad_tag", file_index, n, where(path, n))
            bad, bad_lines = True, bad_lines + 1
            continue
        words.append(fields[0])
        tags.append(fields[-1])
    if words or bad:
        yield from finish()
    if content_lines and bad_lines * 2 > content_lines:
        raise InputError(
            f"{path}: not a {_NAMES[input_format]} file: {bad_lines} of {content_lines} token lines are malformed "
            f"(expected {_SHAPES[input_format].split(' ', 2)[2]} with O/B-X/I-X tags)"
        )


class ConllParser:
    def __init__(self, scheme: str, input_format: str = "conll") -> None:
        if input_format not in NER_FORMATS:
            raise ValueError(f"NER input format must be one of {tuple(NER_FORMATS)}, got {input_format!r}")
        self.scheme = scheme
        self.input_format = input_format

    def __call__(self, path: str, file_index: int, tally: Tally) -> Iterator[Sentence]:
        return parse_conll(file_lines(path, tally), path, file_index, self.scheme, tally, self.input_format)
