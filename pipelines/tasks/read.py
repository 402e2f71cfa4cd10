"""Stage 1, Read: what the task parsers share, and the stage that runs one of them over the task files.

What a record is to the stages (``Record``), their batches, and the ``ReadRecords`` composite: it spreads files
over workers, runs the kind's parser (``parse.py`` of ``classification/``, ``ner/``, ``squad/``: each defines
its records and drop reasons) on each, batches the records and reports, per file,
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
from typing import Protocol

import apache_beam as beam

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import check_unchanged, read_chunks
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.byte_ranges import iter_text_lines

RECORDS_PER_BATCH = 1024
CHARS_PER_BATCH = 1 << 20


class Record(Protocol):
    """What the stages ask of a record (``TextRow``, ``Sentence``, ``QAExample``: each parser's own)."""

    def size(self) -> int:
        """Characters of text: how full a batch is."""
        ...

    def label_names(self) -> Iterable[str]:
        """The label names it carries (none when unlabeled): what a derived label set is made of."""
        ...


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
Parser = Callable[[str, int, Tally], Iterator[Record]]


def counted_chunks(path: str, tally: Tally) -> Iterator[bytes]:
    """The raw (decompressed) bytes of ``path``, counted as ``bytes_read``."""
    for chunk in read_chunks(path):
        tally.add("bytes_read", len(chunk))
        yield chunk


def file_lines(path: str, tally: Tally) -> Iterator[str]:
    """The cleaned text lines of ``path`` (as ``bertstream.pipelines.inputs.read`` cleans them), counting ``bytes_read``."""
    # A line past the cap is refused, naming the file.
    return iter_text_lines(counted_chunks(path, tally), tally.counts, limits.MAX_RECORD_BYTES, path)


def batch_records(records: Iterable[Record], path: str, file_index: int) -> Iterator[RecordBatch]:
    """Consecutive records in batches of at most ``RECORDS_PER_BATCH`` records or about ``CHARS_PER_BATCH``."""
    batch = RecordBatch(file_index, path, 0)
    size = 0
    for record in records:
        batch.records.append(record)
        size += record.size()
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


# ------------------------------------------------------------------------------------------ --max-rows

BEYOND_MAX_ROWS = "beyond_max_rows"  # <unit>_beyond_max_rows: records past --max-rows, counted apart from drops


def clip_counts(counts: list[tuple[int, int]], max_rows: int) -> list[tuple[int, int]]:
    """Each file's records kept under ``--max-rows``: the first ``max_rows`` of the split in file order."""
    out, left = [], max_rows
    for file_index, n in sorted(counts):
        out.append((file_index, min(n, left)))
        left -= out[-1][1]
    return out


def keep_rows(batch: RecordBatch, kept: list[tuple[int, int]]) -> Iterator[RecordBatch]:
    """``batch`` cut to the records its file keeps (:func:`clip_counts`); nothing when none is left."""
    allowed = dict(kept)[batch.file_index] - batch.start
    if allowed >= len(batch.records):
        yield batch
    elif allowed > 0:
        yield RecordBatch(batch.file_index, batch.path, batch.start, batch.records[:allowed])


def beyond_tally(counts: list[tuple[int, int]], kept: list[tuple[int, int]], unit: str) -> Tally:
    tally = Tally()
    tally.add(f"{unit}_{BEYOND_MAX_ROWS}", sum(n for _, n in counts) - sum(n for _, n in kept))
    return tally


class MaxRows(beam.PTransform):
    """``--max-rows N``: ``{"records", "counts"}`` of :class:`ReadRecords` -> the records of the split's first N,
    their files' counts (what the layout numbers) and a tally of the records left out."""

    def __init__(self, max_rows: int, unit: str) -> None:
        super().__init__()
        self.max_rows, self.unit = max_rows, unit

    def expand(self, read):
        counts = read[COUNTS] | "AllCounts" >> beam.combiners.ToList()
        kept = counts | "Clip" >> beam.Map(clip_counts, self.max_rows)
        records = read["records"] | "Keep" >> beam.FlatMap(keep_rows, kept=beam.pvalue.AsSingleton(kept))
        tally = counts | "Beyond" >> beam.Map(beyond_tally, kept=beam.pvalue.AsSingleton(kept), unit=self.unit)
        return {"records": records, COUNTS: kept | "EachCount" >> beam.FlatMap(iter), TALLIES: tally}
