"""What reads the batches of one epoch plan: ``BatchReader`` (one rank's batches, a few shards open) and the
``IterableDataset`` each DataLoader worker of ``PretrainingLoader`` runs over it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from bertstream.trainer.data.collate import Counts, Piece, Shape, collate_packed, count
from bertstream.trainer.data.masking import Masker
from bertstream.trainer.data.plan import TAG_BUCKET, EpochPlan, Layout, batch_at, lanes_touched, rng
from bertstream.trainer.data.shards import ShardData, open_shard
from bertstream.trainer.data.sources import Catalog


class LaneDataset(IterableDataset):
    """What one DataLoader worker runs: its share of the batch stream from step ``start`` of epoch ``epoch``
    on, epoch after epoch, each batch tagged with its epoch and batch index and counted (:class:`Counts`).

    One stream over every epoch, so that one set of workers serves the whole run: re-creating them at each
    epoch stalled the loop (0.8-1.4 s) while they started and re-opened their shards."""

    def __init__(
        self,
        catalog: Catalog,
        layout: Layout,
        *,
        epoch: int,
        start: int,
        lanes: int,
        verify_sha256: bool,
        bucket_batches: int,
        masker: Masker | None = None,
    ) -> None:
        self.catalog, self.layout, self.epoch, self.start, self.lanes = catalog, layout, epoch, start, lanes
        self.verify_sha256, self.bucket_batches = verify_sha256, bucket_batches
        self.masker = masker

    def __iter__(self) -> Iterator[tuple[int, int, torch.Tensor, Shape, Counts]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        i = 0  # the stream's item: worker j serves items j, j+n, ...; torch's round-robin yields them in order
        epoch, start = self.epoch, self.start
        while True:
            plan = EpochPlan(self.layout, epoch)
            reader = BatchReader(
                self.catalog,
                plan,
                verify_sha256=self.verify_sha256,
                bucket_batches=self.bucket_batches,
                lanes=lanes_touched(self.lanes, workers),
                masker=self.masker,
            )
            for t in range(start, plan.steps):
                if i % workers == worker:
                    k = batch_at(t, plan.steps, self.lanes)
                    flat, shape = reader.packed(k)
                    yield epoch, k, torch.from_numpy(flat), shape, count(flat, shape)
                i += 1
            epoch, start = epoch + 1, 0


class BatchReader:
    """Builds any batch of one epoch plan for one rank; keeps a few shards open (LRU).

    ``lanes``: how many lanes of the batch order this reader alternates between (see ``plan``), so that it
    keeps enough shards and length-bucketing chunks open for all of them instead of thrashing."""

    def __init__(
        self,
        catalog: Catalog,
        plan: EpochPlan,
        *,
        verify_sha256: bool,
        bucket_batches: int = 0,
        lanes: int = 1,
        masker: Masker | None = None,
    ) -> None:
        self.catalog, self.plan = catalog, plan
        self.masker = masker  # dynamic masks for plan.epoch; None: the shards' own
        self.verify_sha256, self.bucket_batches = verify_sha256, bucket_batches
        unit = max(1, bucket_batches) * plan.batch_size * plan.world_size if bucket_batches else plan.batch_size
        self.capacity = plan.shards_in_reach(unit) * lanes
        self._open: OrderedDict[int, ShardData] = OrderedDict()
        self._chunks: OrderedDict[int, list[np.ndarray]] = OrderedDict()
        self._chunk_capacity = lanes + 1

    def packed(self, k: int) -> tuple[np.ndarray, Shape]:
        """Batch ``k`` as one flat buffer (see ``collate.LAYOUT``) and its ``(B, T, P)``."""
        b = self.plan.batch_size
        positions = self.positions(k)
        pieces = self.pieces(positions)
        cat = self.catalog
        passes = self.plan.passes(positions) if self.masker is not None else self.plan.epoch  # [B]: batch order
        return collate_packed(pieces, b, cat.pad_id, cat.vocab_size, masker=self.masker, epoch=passes)

    def positions(self, k: int) -> np.ndarray:
        """Epoch positions of batch ``k``, in batch order (after length bucketing)."""
        if not self.bucket_batches:
            return self.plan.batch_positions(k)
        c = self.bucket_batches
        q = k // c
        chunk = self._chunks.get(q)
        if chunk is None:
            chunk = self._chunks[q] = self._bucket(q)
            while len(self._chunks) > self._chunk_capacity:
                self._chunks.popitem(last=False)
        return chunk[k - q * c]

    def _bucket(self, q: int) -> list[np.ndarray]:
        """This rank's batches of chunk ``q``: the chunk's global samples sorted by length, cut into global
        batches, the cuts shuffled, and this rank's slice of each: the same global batches for any W x B."""
        plan, b, c = self.plan, self.plan.batch_size, self.bucket_batches
        g, r = b * plan.world_size, plan.rank
        k0, k1 = q * c, min(plan.steps, (q + 1) * c)
        pos = plan.global_span_positions(k0, k1)
        lengths = np.empty(len(pos), np.int64)
        for p in self.pieces(pos):
            lengths[p.slots] = p.block.input_ids.lengths[p.rows]
        by_length = pos[np.argsort(lengths, kind="stable")]
        order = rng(plan.seed, TAG_BUCKET, plan.epoch, 0, q).permutation(k1 - k0)  # rank 0: keys before W x B
        return [by_length[i * g + r * b : i * g + (r + 1) * b] for i in order]

    def pieces(self, positions: np.ndarray) -> list[Piece]:
        """Group the rows behind epoch positions by shard block; ``slots`` index ``positions``."""
        shard, row = self.plan.rows(positions)
        order = np.lexsort((row, shard))  # read each shard in row order
        shard, row = shard[order], row[order]
        cuts = np.flatnonzero(np.diff(shard)) + 1
        pieces: list[Piece] = []
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(shard)]):
            data = self.shard(int(shard[lo]))
            rows, slots = row[lo:hi], order[lo:hi]
            blk = np.searchsorted(data.block_starts, rows, side="right") - 1
            bcuts = np.flatnonzero(np.diff(blk)) + 1
            for blo, bhi in zip(np.r_[0, bcuts], np.r_[bcuts, len(blk)]):
                i = int(blk[blo])
                pieces.append(Piece(data.ref, data.blocks[i], rows[blo:bhi] - data.block_starts[i], slots[blo:bhi]))
        return pieces

    def shard(self, index: int) -> ShardData:
        data = self._open.get(index)
        if data is not None:
            self._open.move_to_end(index)
            return data
        cat = self.catalog
        data = open_shard(
            cat.shards[index], verify_sha256=self.verify_sha256, vocab_sha256=cat.vocab_sha256, id_type=cat.id_type
        )
        self._open[index] = data
        while len(self._open) > self.capacity:
            self._open.popitem(last=False)
        return data
