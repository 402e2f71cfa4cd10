"""``PretrainingLoader``: the resumable, rank- and worker-partitioned batch stream."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from trainer.data.collate import Piece, Shape, collate_packed, unpack
from trainer.data.config import DataConfig
from trainer.data.plan import TAG_BUCKET, EpochPlan, Lane, advance, interleave, lane_batches, lane_len, rng, split_lanes
from trainer.data.shards import ShardData, open_shard
from trainer.data.sources import Catalog, open_catalog

log = logging.getLogger(__name__)

STATE_FORMAT = "bertstream.data_position"
STATE_VERSION = 1
Batch = dict[str, torch.Tensor]


class TooFewSamples(ValueError):
    """The datasets hold fewer usable samples than one global batch."""


class PretrainingLoader:
    """Iterates the remaining batches of the current epoch, then moves to the next epoch.

    Each batch is a dict of tensors: ``input_ids``, ``token_type_ids``, ``attention_mask`` [B, T] int64;
    ``masked_lm_positions``, ``masked_lm_ids`` [B, P] int64 and ``masked_lm_weights`` [B, P] float32;
    ``next_sentence_labels`` and ``instance_ids`` [B] int64. Every rank yields ``steps_per_epoch`` batches
    per epoch. ``state_dict()`` counts batches handed to the caller (not those prefetched by workers);
    any rank's state is valid for every rank, and a position taken with one ``num_workers`` can be
    loaded with another (the set of remaining samples is kept; their order then differs).

    The order is a pure function of (seed, epoch, manifest counts, world_size, rank, batch_size,
    num_workers): each DataLoader worker serves a contiguous lane of the rank's batches, so workers
    read different shards instead of all of them.
    """

    def __init__(
        self, config: DataConfig, *, expected_vocab_sha256: str | None, world_size: int = 1, rank: int = 0
    ) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
        self.config = config
        self.world_size, self.rank = world_size, rank
        self.catalog: Catalog = open_catalog(
            config.paths,
            fmt=config.format,
            expected_vocab_sha256=expected_vocab_sha256,
            skip_corrupt=config.skip_corrupt,
            verify=config.verify,
        )
        self._epoch = 0
        self._consumed = 0  # batches of this epoch handed to the caller
        self._lanes: list[Lane] | None = None
        self._cursor = 0  # batches handed out since _lanes were set
        self._generation = 0  # invalidates iterators made before a reset / new iteration
        plan = self._plan(0)
        if plan.steps == 0:
            raise TooFewSamples(
                f"{plan.num_samples} usable instances are fewer than one global batch "
                f"({world_size} ranks x {config.batch_size}); lower the batch size (--batch-size) or add data"
            )
        self._steps = plan.steps
        log.info(
            "%d instances in %d shards: %d steps/epoch of %d x %d, %d dropped and %d repeated per epoch, "
            "%d shards (%d instances) skipped as corrupt",
            plan.num_samples,
            len(self.catalog.shards),
            plan.steps,
            world_size,
            config.batch_size,
            plan.dropped,
            plan.repeated,
            len(self.catalog.skipped),
            self.catalog.skipped_samples,
        )

    # -- what the training loop reads -------------------------------------------------------------
    @property
    def steps_per_epoch(self) -> int:
        return self._steps

    def __len__(self) -> int:
        return self._steps

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def batches_consumed(self) -> int:
        """Batches of the current epoch already handed to the caller."""
        return self._consumed

    @property
    def remaining_steps(self) -> int:
        return self._steps - self._consumed

    @property
    def num_samples(self) -> int:
        """Usable instances (after skipped shards), all ranks together."""
        return self.catalog.num_samples

    @property
    def global_batch_size(self) -> int:
        return self.world_size * self.config.batch_size

    @property
    def dropped_per_epoch(self) -> int:
        """Instances left out each epoch (the remainder smaller than one global batch; differs per epoch)."""
        return self._plan(self._epoch).dropped

    @property
    def repeated_per_epoch(self) -> int:
        """Instances served twice each epoch to fill the last global batch (drop_remainder=False)."""
        return self._plan(self._epoch).repeated

    @property
    def skipped_shards(self) -> tuple[tuple[str, str], ...]:
        """``(url, reason)`` of shards excluded by ``skip_corrupt``."""
        return tuple((r.url, why) for r, why in self.catalog.skipped)

    @property
    def skipped_samples(self) -> int:
        return self.catalog.skipped_samples

    @property
    def pad_id(self) -> int:
        return self.catalog.pad_id

    @property
    def vocab_sha256(self) -> str:
        return self.catalog.vocab_sha256

    def set_epoch(self, epoch: int) -> None:
        """Jump to the start of ``epoch`` (normally not needed: iteration moves on by itself)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self._reset(epoch, 0, None)

    # -- iteration ----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        if self._consumed >= self._steps:
            self._reset(self._epoch + 1, 0, None)
        workers = self.config.num_workers
        lanes_wanted = max(1, workers)
        if self._lanes is None:
            lanes = split_lanes([(self._consumed, self._steps)], lanes_wanted)
        else:
            lanes = advance(self._lanes, self._cursor)
            if len(lanes) != lanes_wanted:  # another worker count than when the position was taken
                lanes = split_lanes([r for lane in lanes for r in lane], lanes_wanted)
        self._lanes, self._cursor = lanes, 0
        self._generation += 1
        return self._run(self._generation, self._plan(self._epoch), lanes)

    def _run(self, generation: int, plan: EpochPlan, lanes: list[Lane]) -> Iterator[Batch]:
        cfg = self.config
        dataset = _LaneDataset(
            self.catalog,
            plan,
            lanes,
            verify_sha256=cfg.verify == "sha256" and not self.catalog.verified,
            bucket_batches=cfg.bucket_batches if cfg.length_bucketing else 0,
        )
        # An own generator: DataLoader otherwise draws its worker base seed from the global torch RNG, which
        # would shift the training loop's dropout stream whenever an epoch (or a resumed run) starts.
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self._epoch)
        loader = DataLoader(
            dataset,
            batch_size=None,
            num_workers=cfg.num_workers,
            pin_memory=cfg.pin_memory,
            prefetch_factor=cfg.prefetch_factor if cfg.num_workers else None,
            generator=gen,
        )
        it = iter(loader)
        try:
            for expected in interleave(lanes):
                try:
                    k, flat, shape = next(it)
                except StopIteration:
                    raise RuntimeError(f"DataLoader stopped before batch {expected} of epoch {self._epoch}") from None
                if k != expected:
                    raise RuntimeError(f"DataLoader yielded batch {k}, expected {expected}: worker order broken")
                self._ensure_current(generation)
                self._cursor += 1
                self._consumed += 1
                yield unpack(flat, tuple(shape))
                self._ensure_current(generation)
            if next(it, None) is not None:
                raise RuntimeError(f"DataLoader yielded more than the {sum(map(lane_len, lanes))} batches planned")
        finally:
            del it  # shuts workers down now, also when the caller stops early
        self._reset(self._epoch + 1, 0, None)

    def _ensure_current(self, generation: int) -> None:
        if generation != self._generation:
            raise RuntimeError("this iterator is stale: the loader was re-iterated, reset or loaded since")

    # -- position -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        lanes = None if self._lanes is None else advance(self._lanes, self._cursor)
        cfg = self.config
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "batches_consumed": self._consumed,
            "seed": cfg.seed,
            "world_size": self.world_size,
            "batch_size": cfg.batch_size,
            "steps_per_epoch": self._steps,
            "order": self._order_key(),
            "lanes": None if lanes is None else [[[a, b] for a, b in lane] for lane in lanes],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
            raise ValueError(
                f"not a {STATE_FORMAT} v{STATE_VERSION} state: format={state.get('format')!r} "
                f"version={state.get('version')!r}"
            )
        cfg = self.config
        mine = {
            "seed": cfg.seed,
            "world_size": self.world_size,
            "batch_size": cfg.batch_size,
            "steps_per_epoch": self._steps,
            "order": self._order_key(),
        }
        for key, value in mine.items():
            if state.get(key) != value:
                raise ValueError(
                    f"data position has {key}={state.get(key)!r}, this loader has {value!r}: resuming would "
                    "repeat or skip samples"
                    + (" (dataset shards, shuffle or bucketing settings differ)" if key == "order" else "")
                )
        epoch, consumed = state["epoch"], state["batches_consumed"]
        if not (isinstance(epoch, int) and epoch >= 0 and isinstance(consumed, int) and 0 <= consumed <= self._steps):
            raise ValueError(f"data position epoch={epoch!r} batches_consumed={consumed!r} is out of range")
        lanes = state["lanes"]
        if lanes is not None:
            lanes = [[(int(a), int(b)) for a, b in lane] for lane in lanes]
            if sum(map(lane_len, lanes)) != self._steps - consumed:
                raise ValueError("data position lanes do not cover the rest of the epoch")
        elif consumed:
            lanes = [[(consumed, self._steps)]]
        self._reset(epoch, consumed, lanes)

    def _reset(self, epoch: int, consumed: int, lanes: list[Lane] | None) -> None:
        self._epoch, self._consumed, self._lanes, self._cursor = epoch, consumed, lanes, 0
        self._generation += 1

    def _order_key(self) -> str:
        cfg = self.config
        key = [
            self.catalog.fingerprint,
            cfg.shuffle,
            cfg.window,
            cfg.drop_remainder,
            cfg.length_bucketing and cfg.bucket_batches,
        ]
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]

    def _plan(self, epoch: int) -> EpochPlan:
        cfg = self.config
        return EpochPlan(
            [s.count for s in self.catalog.shards],
            epoch=epoch,
            seed=cfg.seed,
            shuffle=cfg.shuffle,
            window=cfg.window,
            batch_size=cfg.batch_size,
            world_size=self.world_size,
            rank=self.rank,
            drop_remainder=cfg.drop_remainder,
        )


class _LaneDataset(IterableDataset):
    """What one DataLoader worker runs: the batches of its lane, tagged with their index."""

    def __init__(
        self, catalog: Catalog, plan: EpochPlan, lanes: list[Lane], *, verify_sha256: bool, bucket_batches: int
    ) -> None:
        self.catalog, self.plan, self.lanes = catalog, plan, lanes
        self.verify_sha256, self.bucket_batches = verify_sha256, bucket_batches

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor, Shape]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if workers != len(self.lanes):
            raise RuntimeError(f"{workers} workers for {len(self.lanes)} lanes")
        reader = BatchReader(
            self.catalog, self.plan, verify_sha256=self.verify_sha256, bucket_batches=self.bucket_batches
        )
        for k in lane_batches(self.lanes[worker]):
            flat, shape = reader.packed(k)
            yield k, torch.from_numpy(flat), shape


class BatchReader:
    """Builds any batch of one epoch plan for one rank; keeps a few shards open (LRU)."""

    def __init__(self, catalog: Catalog, plan: EpochPlan, *, verify_sha256: bool, bucket_batches: int = 0) -> None:
        self.catalog, self.plan = catalog, plan
        self.verify_sha256, self.bucket_batches = verify_sha256, bucket_batches
        self.capacity = plan.shards_in_reach(max(1, bucket_batches) * plan.batch_size)
        self._open: OrderedDict[int, ShardData] = OrderedDict()
        self._chunk: tuple[int, list[np.ndarray]] | None = None

    def packed(self, k: int) -> tuple[np.ndarray, Shape]:
        """Batch ``k`` as one flat buffer (see ``collate.LAYOUT``) and its ``(B, T, P)``."""
        b = self.plan.batch_size
        return collate_packed(self.pieces(self.positions(k)), b, self.catalog.pad_id, self.catalog.vocab_size)

    def positions(self, k: int) -> np.ndarray:
        """Epoch positions of batch ``k``, in batch order (after length bucketing)."""
        if not self.bucket_batches:
            return self.plan.batch_positions(k)
        c = self.bucket_batches
        q = k // c
        if self._chunk is None or self._chunk[0] != q:
            self._chunk = (q, self._bucket(q))
        return self._chunk[1][k - q * c]

    def _bucket(self, q: int) -> list[np.ndarray]:
        """Batches of chunk ``q``: its samples sorted by length, cut, and the cuts shuffled."""
        plan, b, c = self.plan, self.plan.batch_size, self.bucket_batches
        k0, k1 = q * c, min(plan.steps, (q + 1) * c)
        pos = plan.span_positions(k0, k1)
        lengths = np.empty(len(pos), np.int64)
        for p in self.pieces(pos):
            lengths[p.slots] = p.block.input_ids.lengths[p.rows]
        by_length = pos[np.argsort(lengths, kind="stable")]
        order = rng(plan.seed, TAG_BUCKET, plan.epoch, plan.rank, q).permutation(k1 - k0)
        return [by_length[i * b : (i + 1) * b] for i in order]

    def pieces(self, positions: np.ndarray) -> list[Piece]:
        """Group the rows behind epoch positions by shard block; ``slots`` index ``positions``."""
        shard, row = self.plan.locate(self.plan.stream_positions(positions))
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
