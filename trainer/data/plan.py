"""The sample index space of one epoch, computable up front from the manifest counts alone.

Epoch ``e`` orders the samples in three seeded steps, each a pure function of ``(seed, e, ...)``:

1. the *stream*: shards concatenated in a permuted order;
2. *windows*: the stream is cut into windows of ``window`` samples and each window is permuted
   (epoch position ``i`` holds stream position ``w*window + perm_w[i - w*window]``, ``w = i // window``);
3. *ranks*: with ``steps = N // (world_size * batch_size)`` (or the ceiling, wrapping around, without
   ``drop_remainder``), global batch ``k`` is the epoch positions ``k*W*B + [0, W*B)`` and rank ``r`` takes
   its ``r``-th slice, ``(k*W + r)*B + [0, B)``. So W ranks with batch B see exactly the samples one
   process with batch W*B sees, step for step (DDP and single-process runs are comparable). Every rank
   runs ``steps`` steps; at most one global batch of samples (the last epoch positions) is left out.

Inside a rank, DataLoader workers own *lanes*: lists of batch-index ranges. torch's DataLoader yields
round-robin over workers, skipping exhausted ones, so the order of batches reaching the training loop
is :func:`interleave` of the lanes, and a position is "``cursor`` batches into these lanes".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

Lane = list[tuple[int, int]]  # half-open batch-index ranges, in order

TAG_SHARDS, TAG_WINDOW, TAG_BUCKET = 1, 2, 3


def rng(seed: int, *key: int) -> np.random.Generator:
    """An independent generator per (seed, purpose, epoch, ...): no global RNG state anywhere."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *key])))


def steps_per_epoch(num_samples: int, batch_size: int, world_size: int, drop_remainder: bool) -> int:
    g = batch_size * world_size
    return num_samples // g if drop_remainder else -(-num_samples // g)


class EpochPlan:
    """Where every sample of one epoch goes. Cheap to build; picklable into DataLoader workers."""

    def __init__(
        self,
        counts: Sequence[int],
        *,
        epoch: int,
        seed: int,
        shuffle: bool,
        window: int,
        batch_size: int,
        world_size: int,
        rank: int,
        drop_remainder: bool,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.counts = np.asarray(counts, np.int64)
        self.epoch, self.seed, self.window = epoch, seed, window
        self.batch_size, self.world_size, self.rank = batch_size, world_size, rank
        self.num_samples = int(self.counts.sum())
        self.steps = steps_per_epoch(self.num_samples, batch_size, world_size, drop_remainder)
        used = self.steps * batch_size * world_size
        self.dropped = max(0, self.num_samples - used)  # left out this epoch (drop_remainder)
        self.repeated = max(0, used - self.num_samples)  # served twice (wrap-around without it)
        n = len(self.counts)
        self.order = rng(seed, TAG_SHARDS, epoch).permutation(n) if shuffle else np.arange(n)
        self.stream_starts = np.zeros(n + 1, np.int64)
        np.cumsum(self.counts[self.order], out=self.stream_starts[1:])
        self._perms: dict[int, np.ndarray] = {}

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

    def stream_positions(self, positions: np.ndarray) -> np.ndarray:
        """Epoch positions -> stream positions through the per-window permutations."""
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
        """Stream positions -> (catalog shard index, row in shard)."""
        slot = np.searchsorted(self.stream_starts, stream, side="right") - 1
        return self.order[slot], stream - self.stream_starts[slot]

    def shards_in_reach(self, unit: int) -> int:
        """Most shards that ``unit`` consecutive epoch positions can draw from this epoch (their windows
        span at most ``unit + 2 * window`` stream positions): how many open shards a reader should keep."""
        span = unit + 2 * self.window
        starts, ends = self.stream_starts[:-1], self.stream_starts[1:]
        nonempty = ends > starts
        reach = np.searchsorted(starts, starts[nonempty] + span, side="left") - np.flatnonzero(nonempty)
        return int(reach.max(initial=1)) + 1

    def _perm(self, win: int) -> np.ndarray:
        p = self._perms.get(win)
        if p is None:
            size = min(self.window, self.num_samples - win * self.window)
            p = rng(self.seed, TAG_WINDOW, self.epoch, win).permutation(size)
            if len(self._perms) >= 4:  # a batch touches at most a few windows; readers move forward
                self._perms.pop(next(iter(self._perms)))
            self._perms[win] = p
        return p


def lane_batches(lane: Lane) -> Iterator[int]:
    for a, b in lane:
        yield from range(a, b)


def lane_len(lane: Lane) -> int:
    return sum(b - a for a, b in lane)


def split_lanes(ranges: Lane, num_lanes: int) -> list[Lane]:
    """Cut batch ranges (in order) into ``num_lanes`` contiguous lanes, longer lanes first."""
    total = lane_len(ranges)
    sizes = [total // num_lanes + (j < total % num_lanes) for j in range(num_lanes)]
    lanes: list[Lane] = []
    it = iter(ranges)
    cur: tuple[int, int] | None = None
    for size in sizes:
        lane: Lane = []
        while size:
            if cur is None or cur[0] == cur[1]:
                cur = next(it)
                continue
            take = min(size, cur[1] - cur[0])
            lane.append((cur[0], cur[0] + take))
            cur = (cur[0] + take, cur[1])
            size -= take
        lanes.append(lane)
    return lanes


def interleave(lanes: Sequence[Lane]) -> Iterator[int]:
    """Batch indices in the order torch's DataLoader yields them: round-robin, skipping exhausted lanes."""
    iters = [lane_batches(lane) for lane in lanes]
    active = list(range(len(lanes)))
    while active:
        still = []
        for j in active:
            k = next(iters[j], None)
            if k is not None:
                still.append(j)
                yield k
        active = still


def advance(lanes: Sequence[Lane], cursor: int) -> list[Lane]:
    """What is left of ``lanes`` after ``cursor`` interleaved batches, rotated so that the lane due
    next comes first: serving the result with the same number of workers continues the exact order."""
    lens = [lane_len(lane) for lane in lanes]
    if cursor > sum(lens):
        raise ValueError(f"cursor {cursor} is past the {sum(lens)} batches of these lanes")
    taken = [0] * len(lanes)
    c, due = cursor, 0
    while c:
        active = [j for j in range(len(lanes)) if taken[j] < lens[j]]
        rounds = min(min(lens[j] - taken[j] for j in active), c // len(active))
        if rounds:
            for j in active:
                taken[j] += rounds
            c -= rounds * len(active)
            continue
        for j in active[:c]:
            taken[j] += 1
        due, c = active[c], 0
    tails = [_drop(lane, t) for lane, t in zip(lanes, taken)]
    return tails[due:] + tails[:due]


def _drop(lane: Lane, n: int) -> Lane:
    out: Lane = []
    for a, b in lane:
        skip = min(n, b - a)
        n -= skip
        if a + skip < b:
            out.append((a + skip, b))
    return out
