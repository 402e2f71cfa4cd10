"""Shard writers: context managers that write one Arrow IPC or WebDataset tar shard atomically.

A writer streams into ``<path>.tmp-<token>`` on any Beam filesystem while hashing, and renames to ``path``
on a clean exit (the temporary file is deleted on error), so a reader never sees half a shard and a retried
bundle overwrites rather than duplicates. Both formats are deterministic byte for byte: fixed record-batch
size and compression for Arrow; zero mtimes, owners and modes for tar.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from dataclasses import asdict
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import literal
from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.schemas import id_types, wds
from bertstream.schemas import pretraining as P
from bertstream.schemas.manifest import ShardInfo


class _HashedOutput(io.RawIOBase):
    """A write-only stream into a Beam filesystem file that counts and hashes what passes through."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.tmp = f"{path}.tmp-{os.urandom(4).hex()}"
        self._f = FileSystems.create(self.tmp, compression_type="uncompressed")
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        mv = memoryview(b)
        self._f.write(mv)
        self.sha.update(mv)
        self.size += mv.nbytes
        return mv.nbytes

    def tell(self) -> int:
        return self.size

    def commit(self) -> None:
        self._f.close()
        FileSystems.rename([self.tmp], [self.path])

    def abort(self) -> None:
        try:
            self._f.close()
        finally:
            if FileSystems.exists(self.tmp):
                literal.delete([self.tmp])


class ShardWriter:
    """One shard file, written atomically and hashed; subclasses give the format (``_open``/``write``/``_close``)."""

    fmt = ""

    def __init__(self, path: str, relpath: str) -> None:
        self.path = path
        self.relpath = relpath
        self.count = 0
        self._out: _HashedOutput | None = None
        self.info: ShardInfo | None = None

    def __enter__(self):
        self._out = _HashedOutput(self.path)
        self._open(self._out)
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._out is not None
        if exc_type is not None:
            self._out.abort()
            return
        self._close()
        self._out.commit()
        self.info = ShardInfo(self.relpath, self.fmt, self.count, self._out.size, self._out.sha.hexdigest())

    def written(self) -> dict[str, Any]:
        """The manifest's entry of the finished shard (``ShardInfo`` as a dict), once its with-block closed it."""
        if self.info is None:
            raise RuntimeError(f"{self.relpath}: not written yet (the shard's with-block has not closed it)")
        return asdict(self.info)

    def _open(self, out: _HashedOutput) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def write(self, batch: InstanceBatch) -> None:
        raise NotImplementedError


class ArrowShardWriter(ShardWriter):
    """Arrow IPC file, one row per instance (schema: ``bertstream.schemas.pretraining``)."""

    fmt = "arrow"

    def __init__(
        self,
        path: str,
        relpath: str,
        *,
        id_type: str,
        vocab_sha256: str,
        parameters: dict[str, Any],
        compression: str = "zstd",
        batch_rows: int = 2048,
    ) -> None:
        super().__init__(path, relpath)
        self.schema = P.arrow_schema(id_type, vocab_sha256, parameters)
        self.id_type = id_types.arrow_type(id_type)
        self.options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
        self.batch_rows = batch_rows
        self._writer: pa.ipc.RecordBatchFileWriter | None = None

    def _open(self, out: _HashedOutput) -> None:
        self._sink = pa.PythonFile(out, mode="w")
        self._writer = pa.ipc.new_file(self._sink, self.schema, options=self.options)

    def _close(self) -> None:
        assert self._writer is not None
        self._writer.close()

    def write(self, batch: InstanceBatch) -> None:
        table = to_arrow(batch, self.schema, self.id_type)
        assert self._writer is not None, "write() outside the writer's with-block"
        self._writer.write_table(table, max_chunksize=self.batch_rows)
        self.count += len(batch)


def to_arrow(batch: InstanceBatch, schema: pa.Schema, id_type: pa.DataType) -> pa.Table:
    def ragged(values: np.ndarray, offsets: np.ndarray, t: pa.DataType) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, type=t))

    columns = {
        P.INPUT_IDS: ragged(batch.ids, batch.offsets, id_type),
        P.SEGMENT_A_LENGTH: pa.array(batch.segment_a_length.astype(np.int16)),
        P.MASKED_LM_POSITIONS: ragged(batch.positions, batch.pred_offsets, P.POSITION_TYPE),
        P.MASKED_LM_IDS: ragged(batch.labels, batch.pred_offsets, id_type),
        P.NEXT_SENTENCE_LABEL: pa.array(batch.next_sentence_label.astype(np.int8)),
        P.INSTANCE_ID: pa.array(batch.instance_ids.astype(np.uint64)),
    }
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)  # in the schema's field order


class WebDatasetShardWriter(ShardWriter):
    """POSIX tar of ``<instance id>.bert`` members (layout: ``bertstream.schemas.wds``)."""

    fmt = "webdataset"

    def __init__(self, path: str, relpath: str, *, id_type: str) -> None:
        super().__init__(path, relpath)
        self.id_type = id_types.id_type(id_type).name

    def _open(self, out: _HashedOutput) -> None:
        self._tar = tarfile.open(fileobj=out, mode="w|", format=tarfile.USTAR_FORMAT)

    def _close(self) -> None:
        self._tar.close()

    def write(self, batch: InstanceBatch) -> None:
        payloads = wds.encode_batch(
            batch.ids,
            batch.offsets,
            batch.segment_a_length,
            batch.positions,
            batch.labels,
            batch.pred_offsets,
            batch.next_sentence_label,
            batch.instance_ids,
            self.id_type,
        )
        for iid, payload in zip(batch.instance_ids.tolist(), payloads):
            info = tarfile.TarInfo(wds.member_name(iid))
            info.size = len(payload)
            info.mtime = 0
            info.mode = 0o644
            self._tar.addfile(info, io.BytesIO(payload))
        self.count += len(batch)
