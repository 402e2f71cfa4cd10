"""Stage 7, Shuffle and write: a deterministic global shuffle into shards of near-equal size.

Every instance gets a shuffle key, a seeded hash of its stable id. The key picks the shard (key modulo the
shard count: sizes are multinomial, within a few per cent of each other for thousands of instances per
shard) and orders the instances inside it. Shard contents and bytes therefore depend only on the inputs and
parameters, not on the runner, the worker count or the order of ``--input`` arguments.

The shuffle carries references (see :mod:`bertstream.pipelines.common.spill`): each worker buffers masked batches, writes them
to a spill file ordered by (shard, key), and sends on one (shard, byte range) reference per shard it holds;
the writer of a shard reads its ranges back. Memory is bounded by the spill buffer and by one shard. Beyond
256 shards a reference covers a block of consecutive shards (``spill.keys_per_block``), so references stay few.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import progress as P
from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.common.shards import ArrowShardWriter, WebDatasetShardWriter
from bertstream.pipelines.common.spill import ByteRange, SpillFn, key_blocks, read_ranges, spill_path, write_file
from bertstream.pipelines.pretraining import stats as S
from bertstream.pipelines.pretraining.kernels import switch
from bertstream.schemas.hashing import hash64, mix64_array
from bertstream.schemas.manifest import shard_name

SHARD_PREFIX = "pretrain"


def shuffle_keys(instance_ids: np.ndarray, seed: int) -> np.ndarray:
    salt = np.uint64(hash64("shuffle", seed))
    return mix64_array(np.asarray(instance_ids, dtype=np.uint64) ^ salt)


def shard_order(batch: InstanceBatch, seed: int) -> np.ndarray:
    """The order of a shard's rows: by shuffle key. Duplicate ids (a bundle processed twice) are an error."""
    keys = shuffle_keys(batch.instance_ids, seed)
    order = np.argsort(keys, kind="stable")
    # The key is a bijection of the id (an xor, then SplitMix64's invertible finaliser), so equal ids are equal
    # keys, and those lie side by side once sorted: no hash set of the ids (np.unique took 15% of the stage).
    ordered = keys[order]
    if len(ordered) > 1 and bool((ordered[1:] == ordered[:-1]).any()):
        raise ValueError("duplicate instance ids in a shard: a bundle was processed twice into the output")
    return order


def take(batch: InstanceBatch, index: np.ndarray) -> InstanceBatch:
    """``batch.take(index)``, its ragged gathers compiled (a slice copy per row, no int64 index per token): the
    same arrays, about 2x faster on shuffled rows (memory-bound); the NumPy path while numba is not yet worth
    starting (kernels.switch)."""
    return switch.run(_take_compiled, InstanceBatch.take, batch, index)


def _take_compiled(batch: InstanceBatch, index: np.ndarray) -> InstanceBatch:
    from bertstream.pipelines.pretraining.kernels import gather, readonly  # numba: imported on first use

    index = np.asarray(index, dtype=np.int64)
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= len(batch)):
        raise IndexError(f"rows {int(index.min())}..{int(index.max())} of a batch of {len(batch)}")
    starts, ends = batch.offsets[index], batch.offsets[index + 1]
    pstarts, pends = batch.pred_offsets[index], batch.pred_offsets[index + 1]
    # The kernel does not check bounds: every range must lie inside its array (a corrupt spill must not read past).
    for lo, hi, size in ((starts, ends, len(batch.ids)), (pstarts, pends, len(batch.positions))):
        if len(lo) and (int(lo.min()) < 0 or int(hi.max()) > size or bool((hi < lo).any())):
            raise ValueError("instance offsets outside the batch's arrays")
    starts, ends, pstarts, pends = (readonly(a, np.int64) for a in (starts, ends, pstarts, pends))
    return InstanceBatch(
        instance_ids=batch.instance_ids[index],
        ids=gather.take_ranges(readonly(batch.ids), starts, ends),
        offsets=np.concatenate(([0], np.cumsum(ends - starts))).astype(np.int64, copy=False),
        segment_a_length=batch.segment_a_length[index],
        next_sentence_label=batch.next_sentence_label[index],
        positions=gather.take_ranges(readonly(batch.positions), pstarts, pends),
        labels=gather.take_ranges(readonly(batch.labels), pstarts, pends),
        pred_offsets=np.concatenate(([0], np.cumsum(pends - pstarts))).astype(np.int64, copy=False),
    )


def order_shard(batches: list[InstanceBatch], seed: int) -> InstanceBatch:
    batch = InstanceBatch.concat(batches)
    return take(batch, shard_order(batch, seed))


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardSpec:
    """The shards of a pretraining dataset: where, how many, in which formats, with which Arrow metadata."""

    output_dir: str
    num_shards: int
    seed: int  # the shuffle's: it picks each instance's shard and its place in it
    formats: tuple[str, ...]
    id_type: str
    vocab_sha256: str
    parameters: dict[str, Any]  # the Arrow metadata's copy of the shard parameters
    compression: str
    batch_rows: int

    def writers(self, shard: int) -> list[ArrowShardWriter | WebDatasetShardWriter]:
        """One writer per format for shard ``shard`` (context managers: atomic, hashed as they stream)."""
        writers: list[ArrowShardWriter | WebDatasetShardWriter] = []
        for fmt in self.formats:
            name = shard_name(SHARD_PREFIX, shard, self.num_shards, fmt)
            path = FileSystems.join(self.output_dir, name)
            if fmt == "arrow":
                writers.append(
                    ArrowShardWriter(
                        path,
                        name,
                        id_type=self.id_type,
                        vocab_sha256=self.vocab_sha256,
                        parameters=self.parameters,
                        compression=self.compression,
                        batch_rows=self.batch_rows,
                    )
                )
            else:
                writers.append(WebDatasetShardWriter(path, name, id_type=self.id_type))
        return writers


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteSpec:
    """The shuffle-and-write stage: the shards, the statistics read back from them, the spill folder and how
    much a worker buffers before it spills (``None``: the default of :class:`bertstream.pipelines.common.spill.SpillFn`)."""

    shards: ShardSpec
    stats: S.StatsSpec
    work_dir: str
    spill_bytes: int | None = None


# One shard's instances in one spill file: (path, byte range of an InstanceBatch's wire bytes).
ShardPart = tuple[str, ByteRange]
# A block of consecutive shards in one spill file: (path, int64 offsets: where each of the block's shards
# starts, then where the last ends); see spill.keys_per_block.
BlockPart = tuple[str, bytes]


def shard_parts(parts: Iterable[BlockPart], index: int) -> list[ShardPart]:
    """The ranges of the block's ``index``-th shard in each spill file (empty ones left out)."""
    out = []
    for path, offsets in parts:
        start, end = np.frombuffer(offsets, "<i8", 2, 8 * index).tolist()
        if end > start:
            out.append((path, (start, end - start)))
    return out


def order_by_shard(batch: InstanceBatch, num_shards: int, seed: int) -> tuple[InstanceBatch, list[int]]:
    """The batch ordered by (shard, shuffle key), and where each shard starts (``num_shards + 1`` bounds)."""
    keys = shuffle_keys(batch.instance_ids, seed)
    shard = (keys % np.uint64(num_shards)).astype(np.uint16 if num_shards <= 1 << 16 else np.int64)
    # lexsort((keys, shard)) in two sorts at half its time: by key, then a stable radix sort of the shard numbers
    # (the same order for distinct keys; a duplicate fails the shard's writer). A shard's part of a spill file is
    # then one run in key order, which makes the writer's sort and gather of its runs ~3x faster.
    by_key = np.argsort(keys)
    order = by_key[np.argsort(shard[by_key], kind="stable")]
    return take(batch, order), np.searchsorted(shard[order], np.arange(num_shards + 1)).tolist()


def encode_shards(batch: InstanceBatch, num_shards: int, seed: int) -> Iterator[tuple[int, bytes]]:
    """``(shard, wire bytes)`` for each shard the batch touches, instances ordered by shuffle key."""
    ordered, bounds = order_by_shard(batch, num_shards, seed)
    del batch
    for s in range(num_shards):
        if bounds[s + 1] > bounds[s]:
            yield s, ordered.slice(bounds[s], bounds[s + 1]).to_bytes()


def read_parts(parts: Iterable[ShardPart]) -> InstanceBatch:
    """A shard's instances from its spill-file ranges, not yet in shard order (decoded part by part into
    arrays allocated once: memory holds the shard and one part)."""
    parts = sorted(parts)  # the same concatenation on every runner
    heads = [read_ranges(path, [(offset, InstanceBatch.WIRE_HEADER_BYTES)])[0] for path, (offset, _) in parts]
    return InstanceBatch.concat_wire(
        [InstanceBatch.wire_sizes(h) for h in heads], (read_ranges(path, [byte_range])[0] for path, byte_range in parts)
    )


def read_shard(parts: Iterable[ShardPart], seed: int) -> InstanceBatch:
    batch = read_parts(parts)
    return take(batch, shard_order(batch, seed))


class _SpillShardsFn(SpillFn):
    def __init__(self, spec: WriteSpec) -> None:
        super().__init__(spec.work_dir, spec.spill_bytes)
        self.num_shards = spec.shards.num_shards
        self.seed = spec.shards.seed

    def size(self, batch: InstanceBatch) -> int:
        return batch.ids.nbytes + batch.labels.nbytes + 2 * len(batch.positions) + 35 * len(batch)

    def spill(self, batches: list[InstanceBatch]) -> Iterator[tuple[int, BlockPart]]:
        batch = InstanceBatch.concat(batches)
        batches.clear()  # the buffer's batches are copied: free them before the sorted copy is made
        if not len(batch):
            return
        path = spill_path(self.work_dir, "instances", [batch.instance_ids.tobytes()])
        lengths = np.zeros(self.num_shards, dtype=np.int64)
        encoded = encode_shards(batch, self.num_shards, self.seed)
        del batch  # the generator holds the only reference, and drops it once the sorted copy exists

        def chunks() -> Iterator[bytes]:  # encoded one shard at a time, straight into the file
            for shard, data in encoded:
                lengths[shard] = len(data)
                yield data

        write_file(path, chunks())
        ends = np.cumsum(lengths)  # shards lie in the file in shard order
        for block, shards in enumerate(key_blocks(self.num_shards)):
            lo, hi = shards.start, shards.stop
            if lengths[lo:hi].any():
                offsets = np.concatenate(([ends[lo] - lengths[lo]], ends[lo:hi])).astype("<i8")
                yield block, (path, offsets.tobytes())


def _write_chunk(writers: list[ArrowShardWriter | WebDatasetShardWriter], chunk: InstanceBatch) -> None:
    for w in writers:
        w.write(chunk)


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: WriteSpec) -> None:
        self.shards = spec.shards
        self.stats = spec.stats
        self.num_shards = spec.shards.num_shards

    def process(self, element: tuple[int, Iterable[BlockPart]]) -> Iterator[dict[str, Any]]:
        block, parts = element
        parts = list(parts)
        for i, shard in enumerate(key_blocks(self.num_shards)[block]):
            found = shard_parts(parts, i)
            if found:  # Finalize writes the shards that got no instances
                yield self.write(shard, read_parts(found))

    def write(self, shard: int, batch: InstanceBatch) -> dict[str, Any]:
        """Write the shard in order, one record batch of rows at a time: memory holds the shard once, not
        its sorted copy and its Arrow form as well."""
        order = shard_order(batch, self.shards.seed)
        rows = self.shards.batch_rows  # chunks of whole record batches: the same batches as one write
        writers = self.shards.writers(shard)
        stats = []
        with contextlib.ExitStack() as stack:
            for w in writers:
                stack.enter_context(w)
            # The writers (Arrow conversion, zstd, sha256, the file) run on a thread of their own, a chunk behind
            # the gather and the statistics; both sides release the GIL for most of their time, so a second core
            # overlaps them. One thread, chunks in order: the writers see the same calls, so write the same bytes.
            with ThreadPoolExecutor(1, thread_name_prefix="shard-writer") as behind:
                pending: deque[Future[None]] = deque()
                for start in range(0, len(order), rows):
                    chunk = take(batch, order[start : start + rows])
                    pending.append(behind.submit(_write_chunk, writers, chunk))
                    stats.append(S.batch_stats(chunk, self.stats))  # additive: merged exactly
                    while len(pending) > 1:
                        pending.popleft().result()  # a writer's error is raised here, inside the with-blocks
                while pending:
                    pending.popleft().result()
        P.add("shards", final=True, shards=1, instances=len(batch))
        P.detail(f"wrote shard {shard + 1}/{self.num_shards}: {len(batch)} instances")
        return {"shard": shard, "files": [w.written() for w in writers], "stats": S.merge(stats)}


class WriteShards(beam.PTransform):
    """``PCollection[InstanceBatch]`` -> ``PCollection[dict]``: one result (files, statistics) per shard."""

    def __init__(self, spec: WriteSpec) -> None:
        super().__init__()
        self.split = _SpillShardsFn(spec)
        self.write = _WriteShardFn(spec)

    def expand(self, batches):
        return (
            batches
            | "SpillShards" >> beam.ParDo(self.split)
            | "CollectShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(self.write)
        )
