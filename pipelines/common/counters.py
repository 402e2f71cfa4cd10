"""Counters, the one system every pipeline counts with: names, merging, first places, live reporting.

Counters travel through the pipeline as data and are merged by a global combine, so the manifest's figures
are exact on any runner and worker count: the pretraining stages pass plain ``Counter`` dicts (``merge``);
the task stages pass a ``Tally``, the same counts plus the first few places of every problem. Both are
mirrored to Beam metrics for live monitoring (Dataflow UI) and summarised on stderr as progress.

Names: ``<unit>_read``, ``<unit>_used`` and, for a dropped record, ``<unit>_dropped.<reason>`` (``drop``);
``unit`` is documents for pretraining, rows, sentences or examples for tasks. Alterations and figures
(``truncated``, ``control_chars_removed``, ...) are counted under their own names.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from apache_beam.metrics import Metrics
from apache_beam.transforms.core import CombineFn

NAMESPACE = "bertstream"

FILES_READ = "files_read"
BYTES_READ = "bytes_read"
LINES = "lines_read"
DOCUMENTS_READ = "documents_read"
DOCUMENTS_USED = "documents_used"
SENTENCES = "sentences"
TOKENS = "tokens"
INSTANCES = "instances"
INSTANCES_CREATED = "instances_created"
INVALID_UTF8 = "invalid_utf8_replaced"
CONTROL_CHARS = "control_chars_removed"
SPECIAL_LITERALS = "special_token_literals_removed"
GUTENBERG_STRIPPED = "gutenberg_header_stripped"
# Header, marker and licence lines cut at Gutenberg markers (lines, not documents: the book itself is kept).
GUTENBERG_LINES_STRIPPED = "gutenberg_boilerplate_lines_stripped"
LINES_OUTSIDE_DOC = "lines_outside_doc_skipped"
UNCLOSED_DOC = "unclosed_doc_tags"
SINGLE_SENTENCE_DOCS = "single_sentence_documents"
EMPTY_SENTENCES = "empty_sentences_skipped"
# Sentences longer than max_seq_length - 3 tokens, and their tokens past it: instance creation truncates them.
LONG_SENTENCES = "sentences_longer_than_an_instance"
TOKENS_PAST_MAX_LENGTH = "tokens_truncated_at_least"
# Sentences cut to pretraining.tokenize.sentence_char_limit characters before tokenizing, and the characters cut:
# an instance could only have held a truncated part of them (one 5M-character unpunctuated CJK record took 3.1 GB).
SENTENCES_CUT = "sentences_cut_before_tokenizing"
CHARS_CUT = "characters_cut_before_tokenizing"
# Documents a worker encoded with `tokenizers` because the run's nanotoken was missing there (same ids).
TOKENIZER_FALLBACK = "documents_encoded_by_fallback_tokenizer"

# Text the readers changed rather than dropped, in the order the summaries say it ("altered: ..."). A
# WikiExtractor file's lines outside any <doc> and its <doc>s left open (a file cut short ends in one) are said
# too: they were counted in the manifest alone, and a truncated file read as complete with no word.
ALTERED = (
    INVALID_UTF8,
    CONTROL_CHARS,
    SPECIAL_LITERALS,
    GUTENBERG_STRIPPED,
    GUTENBERG_LINES_STRIPPED,
    EMPTY_SENTENCES,
    LINES_OUTSIDE_DOC,
    UNCLOSED_DOC,
)

# --eval-fraction: documents the training dataset gave to the evaluation one (OUTPUT/eval). Not a drop: nothing is
# lost, so a summary says them apart ("held out"), and documents_read = used + dropped + held out.
DOCUMENTS_HELD_OUT = "documents_held_out"


@dataclass(frozen=True, slots=True)
class DropReason:
    """Why a record is dropped, counted as ``<unit>_dropped.<name>`` (:func:`drop`) for each unit it drops."""

    name: str
    units: tuple[str, ...]  # documents (pretraining, extract), rows, sentences or examples (the task kinds)
    means: str
    shown_at_zero: bool = False  # the report's table of drops lists it in every run (a zero is news too)
    duplicate: bool = False  # --dedup removed it: the report counts it apart, as duplicates


# Every drop reason, once: the stages count by these names and the report derives its tables from them
# (tests/pipelines/common/test_counters.py: no stage counts a reason this table lacks). The reasons several rooms
# count are declared below; a reason one room alone counts (a task kind's, an input format's) is declared by
# that room's module with :func:`reason`, beside the code that counts it, so that adding a kind or a format that
# drops for a reason of its own stays in its room. The table holds them once their modules are imported.
DROP_REASONS: dict[str, DropReason] = {}


def reason(name: str, units: tuple[str, ...], means: str, **how: bool) -> str:
    """Declare the drop reason ``name`` (counted per ``units``: documents, or a task kind's unit) and what it
    means; returns the name the stage counts with (``drop(NAME, unit)``). A name declared again with another
    meaning is refused: each reason is one thing."""
    new = DropReason(name, units, means, **how)
    if DROP_REASONS.setdefault(name, new) != new:
        raise ValueError(f"drop reason {name!r} is declared twice: {DROP_REASONS[name]} and {new}")
    return name


_DOCS, _ROWS, _EXAMPLES = ("documents",), ("rows",), ("examples",)
EMPTY = reason("empty", _DOCS, "no text at all", shown_at_zero=True)
NO_TOKENS = reason("no_tokens", _DOCS + _ROWS, "text that tokenizes to nothing (only whitespace)", shown_at_zero=True)
MALFORMED_JSON = reason(
    "malformed_json", _DOCS + _ROWS + _EXAMPLES, "a line or record that is no JSON", shown_at_zero=True
)
MISSING_TEXT = reason(
    "missing_text_field", _DOCS, "a JSON record or table row without the text field", shown_at_zero=True
)
TEXT_NOT_STRING = reason("text_not_a_string", _DOCS + _ROWS, '"text": 5, null or a list')
EXACT_DUPLICATE = reason(
    "exact_duplicate", _DOCS, "--dedup: normalised text equal to a document with a smaller id", duplicate=True
)
NEAR_DUPLICATE = reason(
    "near_duplicate", _DOCS, "--dedup minhash: estimated Jaccard >= threshold with a smaller id", duplicate=True
)
# Tables (the csv input format and the classification tables read them with inputs/delimited.py)
WRONG_COLUMN_COUNT = reason("wrong_column_count", _DOCS + _ROWS, "a table row with another number of fields")
UNBALANCED_QUOTE = reason("unbalanced_quote", _DOCS + _ROWS, "a CSV row whose quote never closes")
# A task row's, whatever its kind (a kind's own reasons are its room's: squad/parse.py, ner/parse.py, ...)
EMPTY_TEXT = reason("empty_text", _ROWS, "a row whose text (or text pair) is blank")
MISSING_LABEL = reason("missing_label", _ROWS, "a row without its label")
MISSING_FIELD = reason("missing_field", _ROWS, "a JSON row without a column the layout names")
LABEL_NOT_A_VALUE = reason("label_not_a_value", _ROWS, "a JSON list or object where a label goes")
LABEL_NOT_IN_SET = reason("label_not_in_set", _ROWS, "a label outside the dataset's label set")


def drop(reason: str, unit: str = "documents") -> str:
    """The counter of ``unit`` records dropped for ``reason``: ``<unit>_dropped.<reason>``."""
    return f"{unit}_dropped.{reason}"


def dropped(counters: Mapping[str, Any], unit: str = "documents") -> dict[str, int]:
    """``{reason: count}`` of the ``unit`` records dropped, by reason."""
    prefix = drop("", unit)
    return {k[len(prefix) :]: v for k, v in sorted(counters.items()) if k.startswith(prefix)}


def dropped_text(counters: Mapping[str, Any], unit: str = "documents") -> str:
    """``reason: count, ...`` of the ``unit`` records dropped ('' when none), as the command lines print it."""
    return ", ".join(f"{k}: {v}" for k, v in dropped(counters, unit).items())


def altered_text(counters: Mapping[str, Any]) -> str:
    """``name count, ...`` of the ``ALTERED`` counters a run recorded ('' when none)."""
    return ", ".join(f"{k} {counters[k]}" for k in ALTERED if counters.get(k))


def merge(dicts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: Counter = Counter()
    for d in dicts:
        total.update(d)
    return dict(sorted(total.items()))


class MergeCounters(CombineFn):
    """``beam.CombineGlobally`` of counter dicts -> one, sorted by name. Each input is added in place: a plain
    function (``CombineGlobally(merge)``) re-merged and re-sorted everything accumulated every ten inputs, which
    with one source per file (100,000 one-line files: 300,000 counters) made the run quadratic in the file
    count."""

    def create_accumulator(self) -> Counter:
        return Counter()

    def add_input(self, accumulator: Counter, element: Mapping[str, int]) -> Counter:
        accumulator.update(element)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counter]) -> Counter:
        it = iter(accumulators)
        total = next(it, Counter())
        for acc in it:
            total.update(acc)
        return total

    def extract_output(self, accumulator: Counter) -> dict[str, int]:
        return dict(sorted(accumulator.items()))


def report(counters: Mapping[str, int]) -> None:
    """Mirror counters to Beam metrics (visible in runner UIs while the job runs)."""
    for name, value in counters.items():
        if value:
            Metrics.counter(NAMESPACE, name).inc(value)


# --------------------------------------------------------------------------------------------- Tally

FIRST_KEPT = 10
FIRST_LINES = "first_lines"


@dataclass(slots=True)
class Tally:
    """Counts with the first few places of every problem, mergeable in any order.

    Problems are noted with ``note(name, file_index, position, where)``: the count goes up and ``where``
    (``path:line`` or a SQuAD question id) is kept if it is among the first ``FIRST_KEPT`` by
    ``(file_index, position)``, which makes the kept list independent of the order in which workers finish.
    The manifest holds the counts flat, with ``"first_lines": {counter name: [where, ...]}``.
    """

    counts: Counter = field(default_factory=Counter)
    first: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)

    def add(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] += n

    def note(self, name: str, file_index: int, position: int, where: str, n: int = 1) -> None:
        """Count a problem and remember where it happened (the first ``FIRST_KEPT`` places)."""
        self.counts[name] += n
        kept = self.first.setdefault(name, [])
        kept.append((file_index, position, where))
        if len(kept) > 2 * FIRST_KEPT:
            kept.sort()
            del kept[FIRST_KEPT:]

    def update(self, other: Tally) -> None:
        self.counts.update(other.counts)
        for name, places in other.first.items():
            kept = self.first.setdefault(name, [])
            kept.extend(places)
            kept.sort()
            del kept[FIRST_KEPT:]

    @classmethod
    def merge(cls, tallies: Iterable[Tally]) -> Tally:
        out = cls()
        for t in tallies:
            out.update(t)
        return out

    def counters(self) -> dict[str, Any]:
        """Manifest form: counters sorted by name, then ``first_lines``."""
        out: dict[str, Any] = {k: v for k, v in sorted(self.counts.items()) if v}
        out[FIRST_LINES] = {
            name: [w for _, _, w in sorted(places)[:FIRST_KEPT]] for name, places in sorted(self.first.items())
        }
        return out

    def report(self) -> None:
        report(self.counts)


class CombineTallies:
    """``beam.CombineGlobally`` function: many tallies -> one."""

    def __call__(self, tallies: Iterable[Tally]) -> Tally:
        return Tally.merge(tallies)


_last_progress = [0.0]


def progress(message: str, *, every_s: float = 0.0) -> None:
    """One progress line on stderr (workers' stderr reaches the console on the local runner)."""
    now = time.monotonic()
    if every_s and now - _last_progress[0] < every_s:
        return
    _last_progress[0] = now
    from bertstream.pipelines.common.redact import redact_text

    print(f"[bertprep] {redact_text(message)}", file=console(), flush=True)


_console_stream: list = []


def console() -> TextIO:
    """stderr, or in a local worker process whose stderr goes to a log file, the console it came from."""
    fd = os.environ.get("BERTPREP_CONSOLE_FD")
    if not fd:
        return sys.stderr
    if not _console_stream:
        _console_stream.append(os.fdopen(int(fd), "w", closefd=False))
    return _console_stream[0]
