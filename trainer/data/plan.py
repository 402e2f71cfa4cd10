"""The sample index space of one epoch, computable up front from the manifest counts alone.

A *source* is a set of shards read as one dataset: all ``--data`` folders together without weights (today's
concatenation), or one folder per source with ``DIR:WEIGHT``. Each source has its own endless stream of
*passes*; pass ``p`` orders the source's samples in two seeded steps, each a pure function of ``(seed, p)``:

1. the *stream*: the source's shards concatenated in a permuted order;
2. *windows*: the stream is cut into windows of ``window`` samples and each window is permuted
   (pass position ``u`` holds stream position ``w*window + perm_w[u - w*window]``, ``w = u // window``).

An epoch has ``N = sum(quotas)`` positions; :func:`mix_split` deals them to the sources (a fixed, evenly
spread pattern: after ``i`` positions source ``d`` has had ``floor``-exact ``i * quota_d / N`` of them), and
source ``d``'s ``j``-th position of epoch ``e`` is sample ``e * quota_d + j`` of its stream of passes, so a
source smaller than its quota wraps into a fresh pass and a larger one continues next epoch where it stopped.
With one source the quota is its size: epoch ``e`` is pass ``e`` (the order before mixing existed).

*Ranks*: with ``steps = N // (world_size * batch_size)`` (or the ceiling, wrapping around, without
``drop_remainder``), global batch ``k`` is the epoch positions ``k*G + [0, G)``, ``G = W*B``, and rank ``r``
takes its ``r``-th slice, ``(k*W + r)*B + [0, B)``. So W ranks with batch B see exactly the samples one
process with batch W*B sees, step for step; every rank runs ``steps`` steps.

*Batch order*: step ``t`` of an epoch serves global batch :func:`batch_at` ``(t, steps, lanes)``: the
epoch's batches cut into ``lanes`` contiguous lanes, taken round-robin. DataLoader worker ``j`` of ``n``
serves steps ``t = j, j+n, ...`` (torch yields round-robin over workers), so the order depends on
``lanes`` only, never on the worker count; with ``n == lanes`` each worker reads one contiguous lane
(different shards per worker). ``lanes`` is fixed for a whole run (see ``PretrainingLoader``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TAG_SHARDS, TAG_WINDOW, TAG_BUCKET, TAG_SOURCE = 1, 2, 3, 4


def rng(seed: int, *key: int) -> np.random.Generator:
    """An independent generator per (seed, purpose, epoch, ...): no global RNG state anywhere."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *key])))


def steps_per_epoch(num_samples: int, batch_size: int, world_size: int, drop_remainder: bool) -> int:
    g = batch_size * world_size
    return num_samples // g if drop_remainder else -(-num_samples // g)


def batch_at(t: int, steps: int, lanes: int) -> int:
    """Global batch index served at step ``t`` of an epoch of ``steps`` batches cut into ``lanes`` lanes."""
    q, r = divmod(steps, lanes)
    lane, off = (t % lanes, t // lanes) if t < q * lanes else (t - q * lanes, q)
    return lane * q + min(lane, r) + off


def lanes_touched(lanes: int, workers: int) -> int:
    """How many lanes one of ``workers`` DataLoader workers reads from (1 when they are as many as the lanes)."""
    return lanes // int(np.gcd(lanes, max(1, workers)))


def mix_split(positions: np.ndarray, quotas: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Epoch positions -> (source, index among that source's positions of the epoch).

    Source 0 takes position ``i`` when ``floor((i+1) q0 / N) > floor(i q0 / N)`` (its ``floor(i q0 / N)``-th);
    the rest are dealt the same way among sources 1.. (so the first ``i`` positions hold exactly
    ``floor(i q0 / N)`` of source 0: :func:`mix_prefix` is the closed form)."""
    src = np.full(len(positions), len(quotas) - 1, np.int64)
    idx = np.asarray(positions, np.int64).copy()
    rest = idx.copy()
    active = np.ones(len(positions), bool)
    remaining = int(sum(quotas))
    for d, m in enumerate(quotas[:-1]):
        c = rest * m // remaining
        hit = active & ((rest + 1) * m // remaining > c)
        src[hit], idx[hit] = d, c[hit]
        rest = np.where(active, rest - c, rest)
        active &= ~hit
        remaining -= m
    idx[active] = rest[active]
    return src, idx


def mix_prefix(i: int, quotas: Sequence[int]) -> list[int]:
    """How many of the first ``i`` epoch positions (``0 <= i <= N``) each source holds."""
    out, remaining = [], int(sum(quotas))
    for m in quotas[:-1]:
        c = i * m // remaining
        out.append(c)
        i, remaining = i - c, remaining - m
    return [*out, i]


class PassPlan:
    """One pass over one source: shard order and window permutations."""

    def __init__(self, counts: np.ndarray, *, key: tuple[int, ...], seed: int, shuffle: bool, window: int) -> None:
        self.counts, self.key, self.seed, self.window = counts, key, seed, window
        self.num_samples = int(counts.sum())
        n = len(counts)
        self.order = rng(seed, *key[:-1], TAG_SHARDS, key[-1]).permutation(n) if shuffle else np.arange(n)
        self.stream_starts = np.zeros(n + 1, np.int64)
        np.cumsum(counts[self.order], out=self.stream_starts[1:])
        self._perms: dict[int, np.ndarray] = {}

    def stream_positions(self, positions: np.ndarray) -> np.ndarray:
        """Pass positions -> stream positions through the per-window permutations."""
        if self.window == 1:
            return positions
        w = positions // self.window
        out = np.empty_like(positions)
        wins = np.unique(w)
        for win in wins.tolist():
            sel = w == win if len(wins) > 1 else slice(None)
            base = win * self.window
            out[sel] = base + self._perm(win)[positions[sel] - base]
        return out

    def locate(self, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stream positions -> (shard index in this source, row in shard)."""
        slot = np.searchsorted(self.stream_starts, stream, side="right") - 1
        return self.order[slot], stream - self.stream_starts[slot]

    def shards_in_reach(self, unit: int) -> int:
        """Most shards that ``unit`` consecutive pass positions can draw from (their windows span at most
        ``unit + 2 * window`` stream positions)."""
        span = unit + 2 * self.window
        starts, ends = self.stream_starts[:-1], self.stream_starts[1:]
        nonempty = ends > starts
        reach = np.searchsorted(starts, starts[nonempty] + span, side="left") - np.flatnonzero(nonempty)
        return int(reach.max(initial=1)) + 1

    def _perm(self, win: int) -> np.ndarray:
        p = self._perms.get(win)
        if p is None:
            size = min(self.window, self.num_samples - win * self.window)
            *pre, p_index = self.key
            p = rng(self.seed, *pre, TAG_WINDOW, p_index, win).permutation(size)
            if len(self._perms) >= 4:  # a batch touches at most a few windows; readers move forward
                self._perms.pop(next(iter(self._perms)))
            self._perms[win] = p
        return p


@dataclass(frozen=True, slots=True)
class Layout:
    """What every epoch of a loader's plan shares: the shards' sample counts (the catalog's), the order's seed and
    window, and how each global batch is split over the ranks. ``sources`` (one source index per shard) and
    ``quotas`` (samples per source per epoch) describe a weighted mix; without them all shards form one source
    whose quota is its size."""

    counts: Sequence[int]
    seed: int
    shuffle: bool
    window: int
    batch_size: int
    world_size: int
    rank: int
    drop_remainder: bool
    sources: Sequence[int] | None = None
    quotas: Sequence[int] | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside world_size {self.world_size}")
        if (self.sources is None) != (self.quotas is None):
            raise ValueError("sources and quotas go together")


class EpochPlan:
    """Where every sample of epoch ``epoch`` of ``layout`` goes. Cheap to build; picklable into DataLoader
    workers."""

    def __init__(self, layout: Layout, epoch: int) -> None:
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.counts = np.asarray(layout.counts, np.int64)
        self.epoch, self.seed, self.window, self.shuffle = epoch, layout.seed, layout.window, layout.shuffle
        self.batch_size, self.world_size, self.rank = layout.batch_size, layout.world_size, layout.rank
        sources, quotas = layout.sources, layout.quotas
        self.mixed = quotas is not None
        src = np.zeros(len(self.counts), np.int64) if sources is None else np.asarray(sources, np.int64)
        self.source_shards = [np.flatnonzero(src == d) for d in range(int(src.max(initial=0)) + 1)]
        self.source_sizes = [int(self.counts[s].sum()) for s in self.source_shards]
        self.quotas = list(self.source_sizes if quotas is None else quotas)
        if len(self.quotas) != len(self.source_shards):
            raise ValueError(f"{len(self.quotas)} quotas for {len(self.source_shards)} sources")
        self.num_samples = int(sum(self.quotas))
        self.steps = steps_per_epoch(self.num_samples, self.batch_size, self.world_size, layout.drop_remainder)
        used = self.steps * self.batch_size * self.world_size
        self.dropped = max(0, self.num_samples - used)  # left out this epoch (drop_remainder)
        self.repeated = max(0, used - self.num_samples)  # served twice (wrap-around without it)
        self._passes: OrderedDict[tuple[int, int], PassPlan] = OrderedDict()

    # -- positions ----------------------------------------------------------------------------------
    def batch_positions(self, k: int) -> np.ndarray:
        """Epoch positions of this rank's batch ``k``: [batch_size] int64."""
        if not 0 <= k < self.steps:
            raise IndexError(f"batch {k} outside 0..{self.steps - 1}")
        return self.span_positions(k, k + 1)

    def span_positions(self, k0: int, k1: int) -> np.ndarray:
        """Epoch positions of this rank's batches ``k0 .. k1-1`` back to back: [(k1-k0) * batch_size] int64."""
        b, w = self.batch_size, self.world_size
        starts = (np.arange(k0, k1, dtype=np.int64) * w + self.rank) * b  # [k1-k0]
        return (starts[:, None] + np.arange(b, dtype=np.int64)[None, :]).reshape(-1) % self.num_samples

    def global_span_positions(self, k0: int, k1: int) -> np.ndarray:
        """Epoch positions of global batches ``k0 .. k1-1`` (all ranks): [(k1-k0) * W * B] int64."""
        g = self.batch_size * self.world_size
        return np.arange(k0 * g, k1 * g, dtype=np.int64) % self.num_samples

    def rows(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Epoch positions -> (catalog shard index, row in shard)."""
        if not self.mixed:  # one source: epoch e is pass e, and the catalog's shards are its shards
            pp = self.pass_plan(0, self.epoch)
            return pp.locate(pp.stream_positions(positions))
        src, j = mix_split(positions, self.quotas)
        shard, row = np.empty_like(positions), np.empty_like(positions)
        for d in range(len(self.quotas)):
            sel = src == d
            if not sel.any():
                continue
            s = self.epoch * self.quotas[d] + j[sel]  # index in the source's endless stream of passes
            p, u = np.divmod(s, self.source_sizes[d])
            sh, rw = np.empty_like(u), np.empty_like(u)
            lo, hi = int(p.min()), int(p.max())  # a batch spans one pass, or two where a source wraps
            for pi in range(lo, hi + 1):
                at = p == pi if lo != hi else slice(None)
                pp = self.pass_plan(d, pi)
                sh[at], rw[at] = pp.locate(pp.stream_positions(u[at]))
            shard[sel], row[sel] = self.source_shards[d][sh], rw
        return shard, row

    def passes(self, positions: np.ndarray) -> np.ndarray:
        """Epoch positions -> [N] int64 pass of its source's stream each sample is drawn from: the epoch with
        one source; with weights, a folder smaller than its quota serves a sample once per pass, so keying
        dynamic masks by pass gives each repeat of an instance within one epoch its own mask."""
        if not self.mixed:
            return np.full(len(positions), self.epoch, dtype=np.int64)
        src, j = mix_split(positions, self.quotas)
        out = np.empty(len(positions), dtype=np.int64)
        for d in range(len(self.quotas)):
            sel = src == d
            out[sel] = (self.epoch * self.quotas[d] + j[sel]) // self.source_sizes[d]
        return out

    def served(self, num_positions: int) -> list[int]:
        """Samples of each source among the first ``num_positions`` positions served (wrapping past ``N``)."""
        q, r = divmod(num_positions, self.num_samples)
        return [q * m + c for m, c in zip(self.quotas, mix_prefix(r, self.quotas))]

    def pass_plan(self, source: int, p: int) -> PassPlan:
        key = (source, p)
        pp = self._passes.get(key)
        if pp is None:
            # One source keeps the keys of the order before mixing: (seed, tag, pass).
            prefix = (TAG_SOURCE, source) if self.mixed else ()
            counts = self.counts[self.source_shards[source]]
            pp = PassPlan(counts, key=(*prefix, p), seed=self.seed, shuffle=self.shuffle, window=self.window)
            if len(self._passes) >= 2 * len(self.quotas) + 2:
                self._passes.popitem(last=False)
            self._passes[key] = pp
        return pp

    def shards_in_reach(self, unit: int) -> int:
        """Most shards ``unit`` consecutive epoch positions can draw from: how many a reader keeps open."""
        if not self.mixed:
            return self.pass_plan(0, self.epoch).shards_in_reach(unit)
        total = 0
        for d, m in enumerate(self.quotas):
            share = -(-unit * m // self.num_samples) + 1
            p = self.epoch * m // self.source_sizes[d]
            wraps = 0 if self.source_sizes[d] >= m + share else 1  # may straddle two passes
            total += self.pass_plan(d, p).shards_in_reach(share) + wraps
        return total

    # -- one source: the stream view (tests and tools) ------------------------------------------------
    @property
    def order(self) -> np.ndarray:
        return self._single().order

    def stream_positions(self, positions: np.ndarray) -> np.ndarray:
        return self._single().stream_positions(positions)

    def locate(self, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._single().locate(stream)

    def _single(self) -> PassPlan:
        if self.mixed:
            raise ValueError("a weighted mix has one stream per source; use rows()")
        return self.pass_plan(0, self.epoch)
