"""Stage 1, Read: task files -> records (table rows, CoNLL sentences, SQuAD questions) with stable positions.

Pure parsers do the work (``parse_table``, ``parse_conll``, ``parse_squad``, ``align_answer``); the
``ReadRecords`` composite spreads files over workers, batches the records and reports, per file, how many
records it emitted (for dense global indices and range sharding) and a ``Tally`` of what was read, dropped
or repaired. Files are decoded and cleaned as the pretraining reader does (``pipelines.read``: compression by
extension, invalid UTF-8 replaced and counted, control characters and BOMs removed and counted), except
SQuAD JSON, whose contexts are kept byte for byte so that answer offsets stay valid.

Problems either drop a record, counted under ``<unit>_dropped.<reason>`` with its first places, or stop the
run with an ``InputError`` when continuing would be wrong (a file that is not what the task reads).
"""

from __future__ import annotations

import csv
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import apache_beam as beam

from pipelines import counters as C
from pipelines.read import InputError, iter_text_lines, read_chunks
from pipelines.runner import UsageError
from pipelines.tasks.tally import Tally

RECORDS_PER_BATCH = 1024
CHARS_PER_BATCH = 1 << 20
NEARBY_CHARS = 200  # how far from a wrong answer_start the SQuAD fallback looks for the answer text
_BIO_TAG = re.compile(r"^(O|[BI]-\S+)$")

# Drop reasons (counted as <unit>_dropped.<reason>).
WRONG_COLUMN_COUNT = "wrong_column_count"
UNBALANCED_QUOTE = "unbalanced_quote"
WRONG_FIELD_COUNT = "wrong_field_count"  # CoNLL lines that do not have four fields
EMPTY_TEXT = "empty_text"
MISSING_LABEL = "missing_label"
BAD_REGRESSION_LABEL = "bad_regression_label"
MALFORMED_JSON = "malformed_json"
MISSING_FIELD = "missing_field"
MALFORMED_LINE = "malformed_line"
EMPTY_QUESTION = "empty_question"
EMPTY_CONTEXT = "empty_context"
DUPLICATE_ID = "duplicate_id"
NO_MATCHING_ANSWER = "no_matching_answer"


def dropped(unit: str, reason: str) -> str:
    return f"{unit}_dropped.{reason}"


# --------------------------------------------------------------------------------------------- records


@dataclass(slots=True)
class TextRow:
    """One classification/regression row: ``label`` is the raw label text (None when unlabeled)."""

    line: int
    text_a: str
    text_b: str | None
    label: str | None


@dataclass(slots=True)
class Sentence:
    """One CoNLL sentence (IOB2 tags) starting at ``line``."""

    line: int
    words: list[str]
    tags: list[str]


@dataclass(slots=True)
class QAExample:
    """One SQuAD question. ``answers``/``answer_starts`` are as given; ``span`` is the character span of the
    first answer that matched the context (after repair), None when none did or the question is impossible."""

    ordinal: int  # 0-based position of the question in its file, counting every article
    qid: str
    title: str
    context: str
    question: str
    answers: list[str]
    answer_starts: list[int]
    span: tuple[int, int] | None
    is_impossible: bool

    def example_json(self, example_index: int) -> dict[str, Any]:
        return {
            "example_index": example_index,
            "id": self.qid,
            "title": self.title,
            "context": self.context,
            "question": self.question,
            "answers": {"text": self.answers, "answer_start": self.answer_starts},
            "is_impossible": self.is_impossible,
            "answer_span": None if self.span is None else list(self.span),
        }


@dataclass(slots=True)
class RecordBatch:
    """Consecutive records of one file: ``records[i]`` is the file's record number ``start + i`` (0-based,
    counting emitted records only), which with the other files' counts gives its global index."""

    file_index: int
    path: str
    start: int
    records: list = field(default_factory=list)


def where(path: str, line: int) -> str:
    return f"{path}:{line}"


# --------------------------------------------------------------------------------------------- tables


@dataclass(frozen=True, slots=True)
class TableLayout:
    """How to read a classification file: resolved column positions (JSON keys for jsonl)."""

    input_format: str  # tsv | csv | jsonl
    header: bool
    text: str
    pair: str | None
    label: str | None
    regression: bool = False


def split_fields(line: str, input_format: str) -> list[str]:
    """Fields of one line: TSV splits on tabs with no quoting (GLUE texts hold bare quotes); CSV quotes."""
    if input_format == "tsv":
        return line.split("\t")
    return next(csv.reader([line + "\n"]), [])


def column_positions(layout: TableLayout, header: list[str] | None, path: str) -> dict[str, int]:
    """``{"text": i, "pair": j, "label": k}`` for the layout's columns; a missing column is a usage error."""
    flags = {"text": "text-column", "pair": "text-pair-column", "label": "label-column"}
    out = {}
    for role, flag in flags.items():
        col = getattr(layout, role)
        if col is None:
            continue
        if header is None:
            out[role] = int(col)
        elif col in header:
            out[role] = header.index(col)
        else:
            raise UsageError(flag, f"{path}: no column {col!r}; the header has {header}")
    return out


def first_line(path: str, input_format: str) -> list[str] | dict | None:
    """Fields of the first non-blank line (the parsed object for jsonl), cleaned as the reader cleans it."""
    lines = iter_text_lines(read_chunks(path, 1 << 16), Tally().counts)
    for line in islice(lines, 1000):
        if not line.strip():
            continue
        if input_format == "jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError("input", f"{path}: first line is not JSON ({e})") from None
            return obj if isinstance(obj, dict) else None
        return split_fields(line, input_format)
    return None


def check_table_layout(path: str, layout: TableLayout) -> None:
    """Before the pipeline starts: the columns exist in ``path`` (first line), else a usage error naming the flag."""
    first = first_line(path, layout.input_format)
    if first is None:
        raise UsageError("input", f"{path}: holds no data line")
    if layout.input_format == "jsonl":
        flags = {"text": "text-column", "pair": "text-pair-column", "label": "label-column"}
        for role, flag in flags.items():
            col = getattr(layout, role)
            if col is not None and col not in first:
                raise UsageError(flag, f"{path}: first record has no field {col!r}; its fields are {sorted(first)}")
        return
    positions = column_positions(layout, first if layout.header else None, path)
    if not layout.header and max(positions.values()) >= len(first):
        flag = {"text": "text-column", "pair": "text-pair-column", "label": "label-column"}[
            max(positions, key=positions.get)
        ]
        raise UsageError(
            flag, f"{path}: column index {max(positions.values())} but the first line has {len(first)} fields"
        )


def _row_values(fields: list[str], positions: dict[str, int]) -> tuple[str, str | None, str | None]:
    return (
        fields[positions["text"]],
        fields[positions["pair"]] if "pair" in positions else None,
        fields[positions["label"]] if "label" in positions else None,
    )


def _json_values(obj: Any, layout: TableLayout) -> tuple[Any, Any, Any] | None:
    if not isinstance(obj, dict):
        return None
    keys = [k for k in (layout.text, layout.pair, layout.label) if k is not None]
    if any(k not in obj for k in keys):
        return None
    return (
        obj[layout.text],
        obj.get(layout.pair) if layout.pair else None,
        obj.get(layout.label) if layout.label else None,
    )


def _label_text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else json.dumps(value)


def parse_table(
    lines: Iterable[str], path: str, file_index: int, layout: TableLayout, tally: Tally
) -> Iterator[TextRow]:
    """Rows of a TSV/CSV/JSONL file. Counts ``rows_read`` and drops by reason with their line numbers."""
    unit = "rows"
    positions: dict[str, int] | None = None
    expected = 0
    numbered: Iterable[tuple[int, Any]] = enumerate(lines, 1)
    if layout.input_format == "csv":
        numbered = _csv_rows(lines, path, file_index, tally)
    for n, line in numbered:
        if layout.input_format != "csv" and not line.strip():
            tally.add("blank_lines_skipped")
            continue
        if layout.input_format == "jsonl":
            tally.add(f"{unit}_read")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                tally.note(dropped(unit, MALFORMED_JSON), file_index, n, where(path, n))
                continue
            values = _json_values(obj, layout)
            if values is None:
                tally.note(dropped(unit, MISSING_FIELD), file_index, n, where(path, n))
                continue
            a, b, label = values
            if not isinstance(a, str) or (layout.pair and not isinstance(b, str)):
                tally.note(dropped(unit, EMPTY_TEXT), file_index, n, where(path, n))
                continue
            label = None if label is None else _label_text(label)
        else:
            fields = line if isinstance(line, list) else split_fields(line, layout.input_format)
            if not any(f.strip() for f in fields):
                tally.add("blank_lines_skipped")
                continue
            if positions is None:
                if layout.header:
                    positions, expected = column_positions(layout, fields, path), len(fields)
                    continue
                positions, expected = column_positions(layout, None, path), len(fields)
                if max(positions.values()) >= expected:
                    raise InputError(f"{where(path, n)}: {expected} fields, fewer than the columns asked for")
            tally.add(f"{unit}_read")
            if len(fields) != expected:
                tally.note(dropped(unit, WRONG_COLUMN_COUNT), file_index, n, where(path, n))
                continue
            a, b, label = _row_values(fields, positions)
            label = None if label is None else label.strip()
        if not a.strip() or (layout.pair is not None and not b.strip()):
            tally.note(dropped(unit, EMPTY_TEXT), file_index, n, where(path, n))
            continue
        if layout.label is not None:
            if not label:
                tally.note(dropped(unit, MISSING_LABEL), file_index, n, where(path, n))
                continue
            if layout.regression and not _is_float(label):
                tally.note(dropped(unit, BAD_REGRESSION_LABEL), file_index, n, where(path, n))
                continue
        yield TextRow(n, a, b, label)


# A quoted CSV field may span lines, but not more than this many: a stray quote would swallow the file.
MAX_RECORD_LINES = 1000
LINES_AFTER_BAD_QUOTE = "lines_reparsed_after_unbalanced_quote"


def _csv_rows(lines: Iterable[str], path: str, file_index: int, tally: Tally) -> Iterator[tuple[int, list[str]]]:
    """The records of ``_csv_records``; those with an unbalanced quote are counted as read and dropped."""
    for n, fields, span in _csv_records(lines):
        if fields is None:
            tally.add("rows_read")
            tally.note(dropped("rows", UNBALANCED_QUOTE), file_index, n, where(path, n))
            tally.add(LINES_AFTER_BAD_QUOTE, span - 1)
            continue
        yield n, fields


def _csv_records(lines: Iterable[str]) -> Iterator[tuple[int, list[str] | None, int]]:
    """CSV records ``(first line, fields, lines spanned)``; quoted fields may span lines.

    Strict CSV: a record whose quote never closes (or closes with text after it, ``"a"b``) yields ``fields``
    None, and reading starts again at its next line, so one stray quote costs one row, not every row up to
    the next quote. ``lines spanned`` then counts the lines the quote had taken.
    """
    source = iter(lines)
    pending: deque[str] = deque()
    first = 1

    def fill(k: int) -> bool:
        while len(pending) < k:
            line = next(source, None)
            if line is None:
                return False
            pending.append(line)
        return True

    def feed() -> Iterator[str]:
        i = 0
        while i < MAX_RECORD_LINES and fill(i + 1):
            i += 1
            yield pending[i - 1] + "\n"

    while fill(1):
        reader = csv.reader(feed(), strict=True)
        try:
            fields = next(reader)
        except csv.Error:
            yield first, None, reader.line_num
            pending.popleft()
            first += 1
            continue
        span = reader.line_num
        yield first, fields, span
        for _ in range(span):
            pending.popleft()
        first += span


def _is_float(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value == value and abs(value) != float("inf")


# --------------------------------------------------------------------------------------------- CoNLL


def looks_like_conll(path: str, sample_lines: int = 200) -> None:
    """Before the pipeline starts: a usage error unless most of the first content lines have four fields."""
    lines = [
        s
        for s in (x.strip() for x in islice(iter_text_lines(read_chunks(path, 1 << 16), Tally().counts), 5000))
        if s and not s.startswith("-DOCSTART-")
    ][:sample_lines]
    if not lines:
        raise UsageError("input", f"{path}: holds no CoNLL token line")
    four = sum(len(s.split()) == 4 for s in lines)
    if four * 2 < len(lines):
        raise UsageError(
            "input",
            f"{path}: not a CoNLL file: {len(lines) - four} of its first {len(lines)} token lines "
            f"do not have four fields 'token POS chunk TAG' (e.g. {lines[0][:80]!r})",
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


def parse_conll(lines: Iterable[str], path: str, file_index: int, scheme: str, tally: Tally) -> Iterator[Sentence]:
    """Sentences of a CoNLL-2003 file (``token POS chunk TAG``; blank lines and ``-DOCSTART-`` separate).

    A line without four fields or with a tag that is not ``O``/``B-X``/``I-X`` drops its whole sentence
    (a sentence missing a word would misalign every later prediction); both are counted with line numbers.
    """
    unit = "sentences"
    words: list[str] = []
    tags: list[str] = []
    start, bad, content_lines, bad_lines = 0, False, 0, 0

    def finish() -> Iterator[Sentence]:
        tally.add(f"{unit}_read")
        if bad:
            tally.note(dropped(unit, MALFORMED_LINE), file_index, start, where(path, start))
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
        if len(fields) != 4:
            tally.note(f"lines_malformed.{WRONG_FIELD_COUNT}", file_index, n, where(path, n))
            bad, bad_lines = True, bad_lines + 1
            continue
        if not _BIO_TAG.match(fields[3]):
            tally.note("lines_malformed.bad_tag", file_index, n, where(path, n))
            bad, bad_lines = True, bad_lines + 1
            continue
        words.append(fields[0])
        tags.append(fields[3])
    if words or bad:
        yield from finish()
    if content_lines and bad_lines * 2 > content_lines:
        raise InputError(
            f"{path}: not a CoNLL file: {bad_lines} of {content_lines} token lines are malformed "
            "(expected 'token POS chunk TAG' with O/B-X/I-X tags)"
        )


# --------------------------------------------------------------------------------------------- SQuAD


def align_answer(context: str, text: str, start: Any) -> tuple[tuple[int, int] | None, str]:
    """Character span of an answer in its context and how it was found.

    ``exact`` when ``context[start:start+len(text)] == text``; else the documented fallback, in order:
    ``whitespace_normalized`` (same words at ``start``, whitespace differing), ``offset_shifted`` (the exact
    text nearest to ``start`` within ``NEARBY_CHARS``), ``offset_shifted_whitespace_normalized`` (the same
    with whitespace differing); ``unmatched`` when none applies (or the text is empty / start not an int).
    """
    if not isinstance(text, str) or not text.strip() or not isinstance(start, int) or isinstance(start, bool):
        return None, "unmatched"
    if 0 <= start and context[start : start + len(text)] == text:
        return (start, start + len(text)), "exact"
    pattern = re.compile(r"\s+".join(re.escape(w) for w in text.split()))
    lead = len(text) - len(text.lstrip())
    if 0 <= start <= len(context):
        m = pattern.match(context, min(start + lead, len(context)))
        if m:
            return m.span(), "whitespace_normalized"
    lo, hi = max(0, start - NEARBY_CHARS), min(len(context), max(0, start) + len(text) + NEARBY_CHARS)
    best = None
    for m in pattern.finditer(context, lo, hi):
        if best is None or abs(m.start() - start) < abs(best.start() - start):
            best = m
    if best is None:
        return None, "unmatched"
    return best.span(), "offset_shifted" if best.group() == text.strip() else "offset_shifted_whitespace_normalized"


def load_squad(raw: bytes, path: str) -> list[dict]:
    """The article list of a SQuAD JSON file; anything else is an ``InputError``."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not SQuAD JSON ({type(e).__name__}: {e})") from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list) or not all(
        isinstance(a, dict) and isinstance(a.get("paragraphs"), list) for a in articles
    ):
        raise InputError(f"{path}: not SQuAD JSON (expected {{'data': [{{'title', 'paragraphs': [...]}}]}})")
    return articles


def select_articles(n: int, articles: tuple[int, int | None] | None, path: str) -> range:
    if articles is None:
        return range(n)
    start, end = articles
    if start >= n or (end is not None and end > n):
        raise InputError(f"{path}: --articles {start}:{'' if end is None else end} is outside its {n} articles (0:{n})")
    return range(start, n if end is None else end)


def parse_squad(
    articles: list[dict],
    path: str,
    file_index: int,
    selection: tuple[int, int | None] | None,
    training: bool,
    tally: Tally,
) -> Iterator[QAExample]:
    """Questions of the selected articles, answers aligned to their contexts (see ``align_answer``).

    Dropped (counted with ids): empty question or context, a question id seen before in the file, and in a
    training split an answerable question none of whose answers matches its context. Evaluation keeps such
    questions (their answer texts still count for the metric).
    """
    unit = "examples"
    chosen = select_articles(len(articles), selection, path)
    tally.add("articles_read", len(chosen))
    seen: set[str] = set()
    ordinal = 0
    for a_index, article in enumerate(articles):
        paragraphs = article.get("paragraphs") or []
        if a_index not in chosen:
            ordinal += sum(len(p.get("qas") or []) for p in paragraphs if isinstance(p, dict))
            continue
        title = str(article.get("title", ""))
        for para in paragraphs:
            context = para.get("context") if isinstance(para, dict) else None
            for qa in (para.get("qas") or []) if isinstance(para, dict) else []:
                pos, ordinal = ordinal, ordinal + 1
                tally.add(f"{unit}_read")
                if not isinstance(qa, dict):
                    tally.note(dropped(unit, MALFORMED_JSON), file_index, pos, f"{path}#{pos}")
                    continue
                qid = str(qa.get("id", f"{path}#{pos}"))
                question = qa.get("question")
                if not isinstance(context, str) or not context.strip():
                    tally.note(dropped(unit, EMPTY_CONTEXT), file_index, pos, qid)
                    continue
                if not isinstance(question, str) or not question.strip():
                    tally.note(dropped(unit, EMPTY_QUESTION), file_index, pos, qid)
                    continue
                if qid in seen:
                    tally.note(dropped(unit, DUPLICATE_ID), file_index, pos, qid)
                    continue
                seen.add(qid)
                impossible = bool(qa.get("is_impossible", False))
                answers = [a for a in (qa.get("answers") or []) if isinstance(a, dict)]
                texts = [a.get("text") if isinstance(a.get("text"), str) else "" for a in answers]
                starts = [a.get("answer_start") for a in answers]
                span = None
                for text, start in zip(texts, starts):
                    tally.add("answers_read")
                    s, how = align_answer(context, text, start)
                    if how == "unmatched":
                        tally.note("answers_unmatched", file_index, pos, qid)
                    elif how != "exact":
                        tally.note(f"answers_fixed.{how}", file_index, pos, qid)
                    if span is None and s is not None and not impossible:
                        span = s
                if impossible:
                    tally.add("examples_impossible")
                elif span is None:
                    if not answers:
                        tally.note("examples_without_answers", file_index, pos, qid)
                    if training:
                        tally.note(dropped(unit, NO_MATCHING_ANSWER), file_index, pos, qid)
                        continue
                yield QAExample(
                    pos,
                    qid,
                    title,
                    context,
                    question,
                    texts,
                    [s if isinstance(s, int) else -1 for s in starts],
                    span,
                    impossible,
                )


# --------------------------------------------------------------------------------------------- stage

Parser = Callable[[str, int, Tally], Iterator[Any]]


class TableParser:
    def __init__(self, layout: TableLayout) -> None:
        self.layout = layout

    def __call__(self, path: str, file_index: int, tally: Tally) -> Iterator[TextRow]:
        return parse_table(_lines(path, tally), path, file_index, self.layout, tally)


class ConllParser:
    def __init__(self, scheme: str) -> None:
        self.scheme = scheme

    def __call__(self, path: str, file_index: int, tally: Tally) -> Iterator[Sentence]:
        return parse_conll(_lines(path, tally), path, file_index, self.scheme, tally)


class SquadParser:
    def __init__(self, articles: tuple[int, int | None] | None, training: bool) -> None:
        self.articles = articles
        self.training = training

    def __call__(self, path: str, file_index: int, tally: Tally) -> Iterator[QAExample]:
        raw = b"".join(read_chunks(path))
        tally.add("bytes_read", len(raw))
        return parse_squad(load_squad(raw, path), path, file_index, self.articles, self.training, tally)


def _lines(path: str, tally: Tally) -> Iterator[str]:
    def chunks() -> Iterator[bytes]:
        for chunk in read_chunks(path):
            tally.add("bytes_read", len(chunk))
            yield chunk

    return iter_text_lines(chunks(), tally.counts)


def _size(record: Any) -> int:
    if isinstance(record, TextRow):
        return len(record.text_a) + len(record.text_b or "")
    if isinstance(record, Sentence):
        return sum(len(w) for w in record.words)
    return len(record.context) + len(record.question)


def batch_records(records: Iterable[Any], path: str, file_index: int) -> Iterator[RecordBatch]:
    """Consecutive records in batches of at most ``RECORDS_PER_BATCH`` records or about ``CHARS_PER_BATCH``."""
    batch = RecordBatch(file_index, path, 0)
    size = 0
    for record in records:
        batch.records.append(record)
        size += _size(record)
        if len(batch.records) >= RECORDS_PER_BATCH or size >= CHARS_PER_BATCH:
            yield batch
            batch, size = RecordBatch(file_index, path, batch.start + len(batch.records)), 0
    if batch.records:
        yield batch


COUNTS, TALLIES = "counts", "tallies"


class _ReadFileFn(beam.DoFn):
    def __init__(self, parser: Parser) -> None:
        self.parser = parser

    def process(self, element: tuple[int, str]):
        file_index, path = element
        tally = Tally()
        tally.add("files_read")
        n = 0
        for batch in batch_records(self.parser(path, file_index, tally), path, file_index):
            n += len(batch.records)
            yield batch
        tally.report()
        C.progress(f"read {path}: {n} records, {tally.counts['bytes_read'] / 1e6:.1f} MB")
        yield beam.pvalue.TaggedOutput(COUNTS, (file_index, n))
        yield beam.pvalue.TaggedOutput(TALLIES, tally)


class ReadRecords(beam.PTransform):
    """``PCollection[(file_index, path)]`` -> ``{"records": RecordBatch, "counts": (file_index, n), "tallies": Tally}``."""

    def __init__(self, parser: Parser) -> None:
        super().__init__()
        self.parser = parser

    def expand(self, files):
        out = (
            files
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFile" >> beam.ParDo(_ReadFileFn(self.parser)).with_outputs(COUNTS, TALLIES, main="records")
        )
        # Spread the batches of one big file over the workers that featurize them.
        records = out.records | "SpreadBatches" >> beam.Reshuffle()
        return {"records": records, COUNTS: out[COUNTS], TALLIES: out[TALLIES]}
