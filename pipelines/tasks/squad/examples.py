"""SQuAD's ``examples.jsonl``: every example as the official metric reads it, in ``example_index`` order, written
atomically beside the shards (its path, count, bytes and sha256 go in ``manifest.task["files"]``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common.shards import _HashedOutput
from bertstream.pipelines.tasks.features import Layout
from bertstream.pipelines.tasks.read import RecordBatch
from bertstream.schemas import tasks as T


def example_lines(batch: RecordBatch, layout: Layout) -> Iterator[tuple[int, str]]:
    """``(example_index, JSON line)`` for every example of a batch (the index is the global record index)."""
    for i, ex in enumerate(batch.records):
        g = layout.global_index(batch, i)
        yield g, json.dumps(ex.example_json(g), ensure_ascii=False, sort_keys=True)


def write_examples(output_dir: str, lines: Iterable[tuple[int, str]]) -> dict[str, Any]:
    """``examples.jsonl`` in ``example_index`` order, atomically; its path, count, bytes and sha256."""
    ordered = sorted(lines)
    if [g for g, _ in ordered] != list(range(len(ordered))):
        raise ValueError("examples do not have dense indices 0..n-1: a record was lost or duplicated")
    out = _HashedOutput(FileSystems.join(output_dir, T.EXAMPLES_FILE))
    try:
        for _, line in ordered:
            out.write((line + "\n").encode("utf-8"))
    except BaseException:
        out.abort()
        raise
    out.commit()
    return {
        "role": "examples",
        "path": T.EXAMPLES_FILE,
        "format": "jsonl",
        "count": len(ordered),
        "bytes": out.size,
        "sha256": out.sha.hexdigest(),
    }


class WriteExamples(beam.PTransform):
    """``PCollection[RecordBatch of QAExample]`` -> singleton file info of ``examples.jsonl``."""

    def __init__(self, output_dir: str, *, layout) -> None:
        super().__init__()
        self.output_dir = output_dir
        self.layout = layout

    def expand(self, batches):
        output_dir = self.output_dir
        return (
            batches
            | "ExampleLines" >> beam.FlatMap(example_lines, layout=beam.pvalue.AsSingleton(self.layout))
            | "AllExamples" >> beam.combiners.ToList()
            | "WriteFile" >> beam.Map(lambda lines: write_examples(output_dir, lines))
        )
