"""Stage 1, Read: what the task parsers share, and the stage that runs one of them over the task files.

The records (``TextRow``, ``Sentence``, ``QAExample``), their batches, the drop reasons, and the
``ReadRecords`` composite: it spreads files over workers, runs a parser (``bertstream.pipelines.tasks.tables``,
``bertstream.pipelines.tasks.conll``, ``bertstream.pipelines.tasks.squad_json``) on each, batches the records and reports, per file,
how many records it emitted (for dense global indices and range sharding) and a ``Tally`` of what was read,
dropped or repaired. Files are decoded and cleaned as the pretraining reader does (``bertstream.pipelines.inputs.read``:
compression by extension, invalid UTF-8 replaced and counted, control characters and BOMs removed and
counted), except SQuAD JSON, whose contexts are kept byte for byte so that answer offsets stay valid.

Problems either drop a record, counted under ``<unit>_dropped.<reason>`` with its first places, or stop the
run with an ``InputError`` when continuing would be wrong (a file that is not what the task reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import check_unchanged, iter_text_lines, read_chunks

RECORDS_PER_BATCH = 1024
CHARS_PER_BATCH = 1 << 20

# Drop reasons (counted under ``bertstream.pipelines.common.counters.drop(reason, unit)``: <unit>_dropped.<reason>).
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


# --------------------------------------------------------------------------------------------- stage

# A parser: (path, file_index, tally) -> the file's records, counting what it reads and drops in the tally.
Parser = Callable[[str, int, Tally], Iterator[Any]]


def file_lines(path: str, tally: Tally) -> Iterator[str]:
    """The cleaned text lines of ``path`` (as ``bertstream.pipelines.inputs.read`` cleans them), counting ``bytes_read``."""

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

    def process(self, element: tuple):
        # (file_index, path[, size, mtime as listed]): a file that changed since it was listed fails the run.
        file_index, path, *listed = element
        tally = Tally()
        tally.add("files_read")
        n = 0
        for batch in batch_records(self.parser(path, file_index, tally), path, file_index):
            n += len(batch.records)
            yield batch
        if listed:
            check_unchanged(path, *listed)
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
