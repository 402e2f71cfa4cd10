"""``PretrainingLoader``: the resumable, rank- and worker-partitioned batch stream."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any, TypeGuard

import torch
from torch.utils.data import DataLoader

from bertstream.schemas.manifest import Manifest
from bertstream.schemas.vocab import Vocab
from bertstream.trainer.data.collate import Batch, Counts, unpack
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.masking import dynamic_masker
from bertstream.trainer.data.plan import EpochPlan, Layout, batch_at
from bertstream.trainer.data.reader import LaneDataset
from bertstream.trainer.data.sources import Catalog, open_catalog

log = logging.getLogger(__name__)

STATE_FORMAT = "bertstream.data_position"
STATE_VERSION = 2  # v2: the position in global terms (samples of the global order), any W x B


class TooFewSamples(ValueError):
    """The datasets hold fewer usable samples than one global batch."""


class PretrainingLoader:
    """Iterates the remaining batches of the current epoch, then moves to the next epoch.

    Each batch is a dict of tensors: ``input_ids``, ``token_type_ids``, ``attention_mask`` [B, T] int64;
    ``masked_lm_positions``, ``masked_lm_ids`` [B, P] int64 and ``masked_lm_weights`` [B, P] float32;
    ``next_sentence_labels`` and ``instance_ids`` [B] int64. Every rank yields ``steps_per_epoch`` batches
    per epoch. ``state_dict()`` counts batches handed to the caller (not those prefetched by workers).

    The global order (which samples form global batch ``t`` of the run) is a pure function of (seed,
    epoch, manifest counts, weights, global batch size ``W*B``, lanes): never of the world size, the
    per-rank batch or the worker count alone. ``lanes`` (how the epoch's batches are cut for workers to read
    contiguously, see ``plan``) is ``max(1, num_workers)`` of the run's first loader and travels in the
    state, so a position taken with ``W x B`` ranks and ``n`` workers continues exactly on ``W' x B'`` ranks
    (``W'*B' == W*B``) with any ``n'`` workers (each then reads ``lanes_touched`` lanes).
    """

    def __init__(
        self,
        config: DataConfig,
        *,
        expected_vocab_sha256: str | None,
        world_size: int = 1,
        rank: int = 0,
        opened: Mapping[str, Manifest] | None = None,
        vocab: Vocab | None = None,
    ) -> None:
        """``opened`` (manifests by folder) and ``vocab``: what the caller has read already, not read again."""
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
        self.config = config
        self.world_size, self.rank = world_size, rank
        self.catalog: Catalog = open_catalog(config, expected_vocab_sha256=expected_vocab_sha256, opened=opened)
        self._quotas = None if config.weights is None else epoch_quotas(self.catalog, config.weights)
        self.masker = dynamic_masker(config, self.catalog, vocab)  # None: the shards' static masks
        self._epoch = 0
        self._consumed = 0  # batches of this epoch handed to the caller (global batches: the same on every rank)
        self._lanes = config.lanes  # the run's lane count; a loaded state replaces it
        self._generation = 0  # invalidates iterators made before a reset / new iteration
        self._stream: Iterator | None = None  # the workers' batches, across epochs (see _stream_from_here)
        self._stream_key: tuple[int, int, int] | None = None  # (epoch, step, lanes) of its next batch
        plan = self._plan(0)
        if plan.steps == 0:
            raise TooFewSamples(
                f"{plan.num_samples} usable instances are fewer than one global batch "
                f"({world_size} ranks x {config.batch_size}); lower the batch size (--batch-size) or add data"
            )
        self._steps = plan.steps
        mix = f" (per epoch: {self.mix_text()})" if self.weighted else ""
        log.info(
            "%d instances in %d shards: %d steps/epoch of %d x %d, %d dropped and %d repeated per epoch, "
            "%d shards (%d instances) skipped as corrupt%s",
            plan.num_samples,
            len(self.catalog.shards),
            plan.steps,
            world_size,
            config.batch_size,
            plan.dropped,
            plan.repeated,
            len(self.catalog.skipped),
            self.catalog.skipped_samples,
            mix,
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
    def epoch_samples(self) -> int:
        """Samples in one epoch: ``num_samples``, or with weights the mix's epoch (see ``DataConfig``)."""
        return self._plan(self._epoch).num_samples

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

    @property
    def weighted(self) -> bool:
        return self._quotas is not None

    def samples_by_dataset(self) -> dict[str, int]:
        """Samples each ``--data`` folder has contributed so far, all ranks together, since the run began.

        Without weights the folders form one dataset and the count is under the first folder's name."""
        plan = self._plan(self._epoch)
        g = self.global_batch_size
        per_epoch, now = plan.served(self._steps * g), plan.served(self._consumed * g)
        names = self.catalog.folders if self.weighted else self.catalog.folders[:1]
        return {n: self._epoch * a + b for n, a, b in zip(names, per_epoch, now)}

    def set_epoch(self, epoch: int) -> None:
        """Jump to the start of ``epoch`` (normally not needed: iteration moves on by itself)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self._reset(epoch, 0)

    # -- iteration ----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        if self._consumed >= self._steps:
            self._reset(self._epoch + 1, 0)
        self._generation += 1
        return self._run(self._generation)

    def _run(self, generation: int) -> Iterator[Batch]:
        stream = self._stream_from_here()
        while self._consumed < self._steps:
            expected = batch_at(self._consumed, self._steps, self._lanes)
            try:
                epoch, k, flat, shape, counts = next(stream)
            except StopIteration:
                raise RuntimeError(f"DataLoader stopped before batch {expected} of epoch {self._epoch}") from None
            if (epoch, k) != (self._epoch, expected):
                raise RuntimeError(
                    f"DataLoader yielded batch {k} of epoch {epoch}, expected {expected} of epoch {self._epoch}: "
                    "worker order broken"
                )
            self._ensure_current(generation)
            self._consumed += 1
            self._stream_key = self._here()
            b, t, p = shape
            yield Batch(unpack(flat, (b, t, p)), counts)
            self._ensure_current(generation)
        self._reset(self._epoch + 1, 0)

    def _here(self) -> tuple[int, int, int]:
        """(epoch, step, lanes) of the next batch: an epoch's end is the next one's start."""
        if self._consumed >= self._steps:
            return self._epoch + 1, 0, self._lanes
        return self._epoch, self._consumed, self._lanes

    def _stream_from_here(self) -> Iterator[tuple[int, int, torch.Tensor, tuple[int, int, int], Counts]]:
        """The workers' batch stream, positioned at the next batch: the running one when it is there (the
        epoch moved on by itself), else a new one (a jump: ``set_epoch``, ``load_state_dict``, a stopped
        iteration's successor that starts elsewhere)."""
        here = self._here()
        if self._stream is not None and self._stream_key == here:
            return self._stream
        self.close()
        cfg = self.config
        dataset = LaneDataset(
            self.catalog,
            self._layout(),
            epoch=here[0],
            start=here[1],
            lanes=self._lanes,
            verify_sha256=cfg.verify == "sha256" and not self.catalog.verified,
            bucket_batches=cfg.bucket_batches if cfg.length_bucketing else 0,
            masker=self.masker,
        )
        # An own generator: DataLoader otherwise draws its worker base seed from the global torch RNG, which
        # would shift the training loop's dropout stream whenever a stream (or a resumed run) starts.
        gen = torch.Generator().manual_seed(cfg.seeds.workers(here[0]))
        loader = DataLoader(
            dataset,
            batch_size=None,
            pin_memory=cfg.pin_memory,
            generator=gen,
            **cfg.loader_settings(cfg.prefetch_factor),
        )
        self._stream, self._stream_key = iter(loader), here
        return self._stream

    def close(self) -> None:
        """Stop the workers now (they also stop with the loader); the next iteration starts new ones."""
        stream, self._stream, self._stream_key = self._stream, None, None
        shutdown = getattr(stream, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    def _ensure_current(self, generation: int) -> None:
        if generation != self._generation:
            raise RuntimeError("this iterator is stale: the loader was re-iterated, reset or loaded since")

    # -- position -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The position in global terms: global samples of the epoch consumed, in the global order."""
        cfg = self.config
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "samples_consumed": self._consumed * self.global_batch_size,
            "batches_consumed": self._consumed,  # global batches: the same count on every rank
            "global_batch_size": self.global_batch_size,
            "world_size": self.world_size,  # how it was taken (messages only)
            "batch_size": cfg.batch_size,
            "seed": cfg.seeds.order,
            "steps_per_epoch": self._steps,
            "order": self._order_key(),
            "lanes": self._lanes,
            "samples_by_dataset": self.samples_by_dataset(),  # informational
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping):  # a checkpoint's state.json is untrusted: a string failed in a traceback
            raise ValueError(f"the data position is a {type(state).__name__}, not an object")
        if state.get("format") != STATE_FORMAT or state.get("version") not in (1, STATE_VERSION):
            raise ValueError(
                f"not a {STATE_FORMAT} v1/v{STATE_VERSION} state: format={state.get('format')!r} "
                f"version={state.get('version')!r}"
            )
        state = _from_v1(state) if state["version"] == 1 else state
        cfg = self.config
        theirs = state.get("global_batch_size")
        if theirs != self.global_batch_size:
            raise ValueError(
                f"data position was taken with a global batch of {state.get('world_size')} x "
                f"{state.get('batch_size')} = {theirs}, this loader has {self.world_size} x {cfg.batch_size} = "
                f"{self.global_batch_size}: resuming would repeat or skip samples"
            )
        mine = {"order": self._order_key(), "seed": cfg.seeds.order, "steps_per_epoch": self._steps}
        for key, value in mine.items():
            if state.get(key) != value:
                raise ValueError(
                    f"data position has {key}={state.get(key)!r}, this loader has {value!r}: resuming would "
                    "repeat or skip samples"
                    + (" (dataset shards, weights, shuffle or bucketing settings differ)" if key == "order" else "")
                )
        epoch, samples, lanes = state.get("epoch"), state.get("samples_consumed"), state.get("lanes")
        g = self.global_batch_size
        # epoch seeds the epoch's generator with the seed: bounded so that the sum stays an int64
        if not (
            _count(epoch, 1 << 32)
            and _count(samples, self._steps * g + 1)
            and _count(lanes, 1 << 32)
            and samples % g == 0
            and lanes >= 1
        ):
            raise ValueError(f"data position epoch={epoch!r} samples_consumed={samples!r} lanes={lanes!r} is invalid")
        self._lanes = lanes
        self._reset(epoch, samples // g)

    def _reset(self, epoch: int, consumed: int) -> None:
        self._epoch, self._consumed = epoch, consumed
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
        if self._quotas is not None:  # unweighted keys stay as they were, so older positions still load
            key.append(self._quotas)
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]

    def mix_text(self) -> str:
        """Samples per epoch of each weighted folder, e.g. ``wiki 700 (70.0%), books 300 (30.0%)``."""
        quotas = self._quotas or []
        total = sum(quotas)
        return ", ".join(f"{p} {m} ({m / total:.1%})" for p, m in zip(self.catalog.folders, quotas))

    def _plan(self, epoch: int) -> EpochPlan:
        return EpochPlan(self._layout(), epoch)

    def _layout(self) -> Layout:
        cfg = self.config
        weighted = self._quotas is not None
        return Layout(
            [s.count for s in self.catalog.shards],
            seed=cfg.seeds.order,
            shuffle=cfg.shuffle,
            window=cfg.window,
            batch_size=cfg.batch_size,
            world_size=self.world_size,
            rank=self.rank,
            drop_remainder=cfg.drop_remainder,
            sources=[s.dataset for s in self.catalog.shards] if weighted else None,
            quotas=self._quotas,
        )


def _count(value: Any, below: int) -> TypeGuard[int]:
    """Whether ``value`` (read from a checkpoint) is an integer in [0, below): a bool is none."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < below


def epoch_quotas(catalog: Catalog, weights: tuple[float, ...]) -> list[int]:
    """Samples per folder per epoch: the heaviest-weighted folder read once, the others in proportion (the
    catalog has checked that each folder holds samples)."""
    paths = catalog.folders
    sizes = [0] * len(paths)
    for s in catalog.shards:
        sizes[s.dataset] += s.count
    h = max(range(len(weights)), key=lambda d: weights[d])  # the first of the heaviest
    quotas = [sizes[h] if d == h else round(sizes[h] * w / weights[h]) for d, w in enumerate(weights)]
    small = [f"{p}:{w:g}" for p, w, m in zip(paths, weights, quotas) if m < 1]
    if small:
        raise ValueError(f"weight of {', '.join(small)} gives it no sample per epoch of {sizes[h]} from {paths[h]}")
    return quotas


def _from_v1(state: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 position (per-rank batches and explicit worker lanes) in v2 terms, when its order is the v2 one:
    v1 lanes of an uninterrupted run (or one resumed with its worker count) interleave as :func:`batch_at`."""
    steps, consumed, lanes = state["steps_per_epoch"], state["batches_consumed"], state["lanes"]
    g = state["world_size"] * state["batch_size"]
    n = 1 if lanes is None else len(lanes)
    if lanes is not None:
        iters = [iter([k for a, b in lane for k in range(a, b)]) for lane in lanes]
        rest: list[int] = []
        while iters:
            nxt = [(it, next(it, None)) for it in iters]
            rest += [k for _, k in nxt if k is not None]
            iters = [it for it, k in nxt if k is not None]
        if rest != [batch_at(t, steps, n) for t in range(consumed, steps)]:
            raise ValueError("a v1 data position taken after a worker-count change cannot be continued exactly")
    return {**state, "samples_consumed": consumed * g, "global_batch_size": g, "lanes": n}
