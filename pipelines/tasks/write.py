"""Stage 3, Write: featurized rows -> ``<kind>-0000i-of-0000N.arrow`` shards (a kind's own files: its room).

Shard ``i`` holds the rows of the records whose global index ``g`` (input order: files sorted by path, then
position in the file) satisfies ``g * N // total == i``: consecutive ranges, so every window of a record
lands in the same shard and the shards in order are the input in order. Inside a shard rows are sorted by
``row_id``. The bytes therefore depend only on the inputs and parameters, not on the runner or the worker
count. Files are written atomically and hashed as they stream (``bertstream.pipelines.common.shards.ShardWriter``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common.shards import ShardWriter, _HashedOutput
from bertstream.pipelines.tasks.features import GLOBAL, Layout, from_wire, to_wire
from bertstream.pipelines.tasks.kind import LabelMeaning
from bertstream.schemas import tasks as T
from bertstream.schemas.manifest import shard_name


def split_by_shard(t: pa.Table, layout: Layout, num_shards: int) -> dict[int, pa.Table]:
    """Rows grouped by their shard (``GLOBAL`` dropped)."""
    shard = layout.shard_of(t.column(GLOBAL).to_numpy(), num_shards)
    t = t.drop_columns([GLOBAL])
    out = {}
    for s in np.unique(shard):
        out[int(s)] = t.take(pa.array(np.flatnonzero(shard == s)))
    return out


def order_shard(tables: Sequence[pa.Table]) -> pa.Table:
    """One shard's rows sorted by ``row_id``; duplicate ids mean a bundle was processed twice into the output."""
    t = pa.concat_tables(tables) if tables else None
    if t is None or not t.num_rows:
        return t
    t = t.take(pc.sort_indices(t, sort_keys=[(T.ROW_ID, "ascending")]))
    ids = t.column(T.ROW_ID).to_numpy()
    if (np.diff(ids) == 0).any():
        raise ValueError("duplicate row ids in a shard: a bundle was processed twice into the output")
    return t.combine_chunks()


class TaskShardWriter(ShardWriter):
    """Arrow IPC file of task rows with ``schema`` (metadata included): the pretraining shard writer (atomic,
    hashed as it streams) with the task schema, the whole table in record batches of ``batch_rows``."""

    fmt = "arrow"

    def __init__(self, path: str, relpath: str, schema: pa.Schema, *, compression: str, batch_rows: int) -> None:
        super().__init__(path, relpath)
        self.schema = schema
        self.options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
        self.batch_rows = batch_rows

    def _open(self, out: _HashedOutput) -> None:
        self._sink = pa.PythonFile(out, mode="w")
        self._writer = pa.ipc.new_file(self._sink, self.schema, options=self.options)

    def _close(self) -> None:
        self._writer.close()

    def write(self, t: pa.Table) -> None:
        self._writer.write_table(pa.Table.from_arrays(t.columns, schema=self.schema), max_chunksize=self.batch_rows)
        self.count += t.num_rows


def shard_stats(t: pa.Table | None, label: LabelMeaning, sequences: str | None = None) -> dict[str, Any]:
    """Mergeable figures of one shard: rows, sequences, tokens, longest sequence, histogram of label ids (where the
    kind declares its label a counted id per row: a class, not a regression's value). ``sequences``: the column
    of a row's sequence lengths where a row holds several (its candidates); None: each row is one sequence."""
    if t is None or not t.num_rows:
        return {"rows": 0, "sequences": 0, "tokens": 0, "max_length": 0, "label_counts": {}}
    if sequences is None:
        lengths = pc.list_value_length(t.column(T.INPUT_IDS)).to_numpy()
    else:
        lengths = pc.list_flatten(t.column(sequences)).to_numpy()
    stats: dict[str, Any] = {
        "rows": t.num_rows,
        "sequences": len(lengths),
        "tokens": int(lengths.sum()),
        "max_length": int(lengths.max(initial=0)),
        "label_counts": {},
    }
    if label.counted and label.column is not None:
        labels = t.column(label.column).drop_null().to_numpy()
        ids, counts = np.unique(labels, return_counts=True)
        stats["label_counts"] = {str(int(i)): int(c) for i, c in zip(ids, counts)}
    return stats


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardSpec:
    """What a shard writer needs besides the rows (picklable; the schema is built once labels are known)."""

    output_dir: str
    kind: str
    layout: T.RowLayout  # the contract's row layout (its ``sequences``: the column of a row's sequence lengths)
    unit: str  # what one input record is (the kind's ``unit``): the counters' and totals' word
    label: LabelMeaning  # what the rows' label is: counted in the statistics or not
    num_shards: int
    id_type: str
    vocab_sha256: str
    parameters: dict[str, Any]
    compression: str
    batch_rows: int

    def write(self, shard: int, t: pa.Table | None, labels: Sequence[str]) -> dict[str, Any]:
        schema = T.arrow_schema(self.layout, self.kind, self.id_type, self.vocab_sha256, self.parameters, labels)
        name = shard_name(self.kind, shard, self.num_shards, "arrow")
        writer = TaskShardWriter(
            FileSystems.join(self.output_dir, name),
            name,
            schema,
            compression=self.compression,
            batch_rows=self.batch_rows,
        )
        with writer:
            if t is not None and t.num_rows:
                writer.write(t)
        return {"shard": shard, "files": [writer.written()], "stats": shard_stats(t, self.label, self.layout.sequences)}


class _AssignShardFn(beam.DoFn):
    def __init__(self, num_shards: int) -> None:
        self.num_shards = num_shards

    def process(self, wire: bytes, layout: Layout) -> Iterator[tuple[int, bytes]]:
        for shard, part in split_by_shard(from_wire(wire), layout, self.num_shards).items():
            yield shard, to_wire(part)


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: ShardSpec) -> None:
        self.spec = spec

    def process(self, element: tuple[int, Iterable[bytes]], labels: list[str]) -> Iterator[dict[str, Any]]:
        shard, parts = element
        yield self.spec.write(shard, order_shard([from_wire(p) for p in parts]), labels)


class WriteTaskShards(beam.PTransform):
    """``PCollection[wire bytes]`` -> ``PCollection[dict]``: one result (file info, statistics) per non-empty shard."""

    def __init__(self, spec: ShardSpec, *, labels, layout) -> None:
        super().__init__()
        self.spec = spec
        self.labels = labels
        self.layout = layout

    def expand(self, features):
        return (
            features
            | "AssignShard"
            >> beam.ParDo(_AssignShardFn(self.spec.num_shards), layout=beam.pvalue.AsSingleton(self.layout))
            | "CollectShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(_WriteShardFn(self.spec), labels=beam.pvalue.AsSingleton(self.labels))
        )
