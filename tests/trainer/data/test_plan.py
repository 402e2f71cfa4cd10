import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from bertstream.trainer.data.plan import (
    EpochPlan,
    Layout,
    batch_at,
    lanes_touched,
    mix_prefix,
    mix_split,
    steps_per_epoch,
)

COUNTS = (37, 120, 5, 0, 88, 61)  # 311 samples


def plan(
    epoch: int = 0,
    *,
    seed: int = 3,
    rank: int = 0,
    world_size: int = 2,
    batch_size: int = 8,
    window: int = 50,
    drop_remainder: bool = True,
    shuffle: bool = True,
) -> EpochPlan:
    layout = Layout(
        COUNTS,
        seed=seed,
        shuffle=shuffle,
        window=window,
        batch_size=batch_size,
        world_size=world_size,
        rank=rank,
        drop_remainder=drop_remainder,
    )
    return EpochPlan(layout, epoch)


def rank_stream(p: EpochPlan) -> np.ndarray:
    return np.concatenate([p.stream_positions(p.batch_positions(k)) for k in range(p.steps)])


def test_steps_per_epoch() -> None:
    assert steps_per_epoch(311, 8, 2, True) == 19
    assert steps_per_epoch(311, 8, 2, False) == 20
    assert steps_per_epoch(320, 8, 2, True) == 20
    assert steps_per_epoch(15, 8, 2, True) == 0


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_sample_once_per_epoch_across_ranks(world_size: int) -> None:
    plans = [plan(rank=r, world_size=world_size) for r in range(world_size)]
    assert len({p.steps for p in plans}) == 1
    seen = np.concatenate([rank_stream(p) for p in plans])
    p = plans[0]
    assert len(seen) == p.steps * world_size * 8 == 311 - p.dropped
    assert len(np.unique(seen)) == len(seen)
    assert p.dropped == 311 % (world_size * 8) and p.repeated == 0


def test_without_drop_remainder_the_last_global_batch_wraps_around() -> None:
    plans = [plan(rank=r, drop_remainder=False) for r in range(2)]
    seen = np.concatenate([rank_stream(p) for p in plans])
    assert plans[0].repeated == 20 * 16 - 311
    assert set(seen.tolist()) == set(range(311))
    assert len(seen) - len(np.unique(seen)) == plans[0].repeated


def test_shuffle_differs_per_epoch_and_repeats_per_seed() -> None:
    a, b, a2 = rank_stream(plan(0)), rank_stream(plan(1)), rank_stream(plan(0))
    assert np.array_equal(a, a2)
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, rank_stream(plan(0, seed=4)))
    assert not np.array_equal(plan(0).order, plan(1).order) or not np.array_equal(plan(0).order, plan(2).order)


def test_window_shuffle_stays_inside_its_window() -> None:
    p = plan(window=50)
    epoch_pos = np.arange(p.num_samples)
    stream = p.stream_positions(epoch_pos)
    assert np.array_equal(np.sort(stream), epoch_pos)
    assert np.array_equal(stream // 50, epoch_pos // 50)
    assert not np.array_equal(stream, epoch_pos)


def test_no_shuffle_is_stream_order() -> None:
    p = plan(shuffle=False, window=1, world_size=1)
    assert np.array_equal(rank_stream(p), np.arange(p.steps * 8))
    assert np.array_equal(p.order, np.arange(len(COUNTS)))


def test_locate_covers_each_shard_row_once_and_skips_empty_shards() -> None:
    p = plan()
    shard, row = p.locate(np.arange(p.num_samples))
    pairs = set(zip(shard.tolist(), row.tolist()))
    assert pairs == {(s, r) for s, c in enumerate(COUNTS) for r in range(c)}


def test_global_rng_state_is_untouched() -> None:
    np.random.seed(1)
    random.seed(1)
    torch.manual_seed(1)
    before = (np.random.get_state()[1].copy(), random.getstate(), torch.random.get_rng_state().clone())
    a = rank_stream(plan(2))
    np.random.seed(99)  # global seeding must not change the data order either
    assert np.array_equal(a, rank_stream(plan(2)))
    np.random.seed(1)
    assert np.array_equal(np.random.get_state()[1], before[0])
    assert random.getstate() == before[1]
    assert torch.equal(torch.random.get_rng_state(), before[2])


@pytest.mark.parametrize(("steps", "lanes"), [(10, 3), (9, 3), (2, 3), (7, 1), (0, 2)])
def test_batch_order_takes_contiguous_lanes_round_robin(steps: int, lanes: int) -> None:
    order = [batch_at(t, steps, lanes) for t in range(steps)]
    assert sorted(order) == list(range(steps))
    q, r = divmod(steps, lanes)
    sizes = [q + (j < r) for j in range(lanes)]  # longer lanes first
    cuts = np.cumsum([0, *sizes])
    rounds = [[int(cuts[j]) + i for j in range(lanes) if i < sizes[j]] for i in range(max(sizes, default=0))]
    assert order == [k for rnd in rounds for k in rnd]
    if (steps, lanes) == (10, 3):
        assert order == [0, 4, 7, 1, 5, 8, 2, 6, 9, 3]


@pytest.mark.parametrize(("lanes", "workers"), [(3, 3), (3, 2), (2, 4), (4, 2), (1, 3)])
def test_each_worker_reads_few_lanes(lanes: int, workers: int) -> None:
    steps = 24
    for j in range(workers):
        touched = {_lane_of(batch_at(t, steps, lanes), steps, lanes) for t in range(j, steps, workers)}
        assert len(touched) == lanes_touched(lanes, workers)


def _lane_of(k: int, steps: int, lanes: int) -> int:
    q, r = divmod(steps, lanes)
    return next(j for j in range(lanes) if k < (j + 1) * q + min(j + 1, r))


class _Strided(IterableDataset):
    def __init__(self, n: int, start: int) -> None:
        self.n, self.start = n, start

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        j, w = (0, 1) if info is None else (info.id, info.num_workers)
        yield from range(self.start + j, self.n, w)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(("n", "start", "workers"), [(9, 0, 3), (10, 3, 3), (2, 0, 3), (7, 6, 2)])
def test_torch_dataloader_yields_strided_workers_in_step_order(n: int, start: int, workers: int) -> None:
    """The assumption the loader's order rests on, checked against torch itself: worker j serving steps
    j, j+n, ... comes out in step order, exhausted workers skipped."""
    got = [int(x) for x in DataLoader(_Strided(n, start), batch_size=None, num_workers=workers, prefetch_factor=3)]
    assert got == list(range(start, n))


def test_ranks_split_each_global_batch_of_the_single_process_run() -> None:
    counts = [37, 120, 5, 64]
    kw = dict(seed=9, shuffle=True, window=16, drop_remainder=True)
    single = EpochPlan(Layout(counts, batch_size=8, world_size=1, rank=0, **kw), 2)
    ranks = [EpochPlan(Layout(counts, batch_size=4, world_size=2, rank=r, **kw), 2) for r in range(2)]
    assert single.steps == ranks[0].steps == ranks[1].steps
    for k in range(single.steps):
        union = np.concatenate([p.batch_positions(k) for p in ranks])
        assert np.array_equal(union, single.batch_positions(k))


@pytest.mark.parametrize("quotas", [[70, 30], [5, 1, 13], [1, 99], [8]])
def test_mix_deals_exact_quotas_evenly_and_its_prefix_counts_agree(quotas: list[int]) -> None:
    n = sum(quotas)
    src, idx = mix_split(np.arange(n), quotas)
    for d, m in enumerate(quotas):
        assert sorted(idx[src == d].tolist()) == list(range(m))  # each source's j-th position once
        assert list(idx[src == d]) == sorted(idx[src == d])  # in order
    for i in range(n + 1):
        assert mix_prefix(i, quotas) == [int((src[:i] == d).sum()) for d in range(len(quotas))]
        # evenly spread: every prefix holds its share of each source, within one sample per level
        assert all(abs(c - i * m / n) < len(quotas) for c, m in zip(mix_prefix(i, quotas), quotas))


def mixed(epoch: int, *, rank: int = 0, world_size: int = 1, batch_size: int = 8) -> EpochPlan:
    # Source 0: shards 0, 2 (sizes 20 + 5); source 1: shards 1, 3 (sizes 30 + 0); quotas 50 and 15 per epoch.
    layout = Layout(
        [20, 30, 5, 0],
        seed=3,
        shuffle=True,
        window=8,
        batch_size=batch_size,
        world_size=world_size,
        rank=rank,
        drop_remainder=True,
        sources=[0, 1, 0, 1],
        quotas=[50, 15],
    )
    return EpochPlan(layout, epoch)


def test_mixed_sources_wrap_into_fresh_passes_and_continue_across_epochs() -> None:
    rows = [list(zip(*[a.tolist() for a in mixed(e).rows(np.arange(65))])) for e in range(4)]
    for r in rows:
        assert sum(s in (0, 2) for s, _ in r) == 50 and sum(s == 1 for s, _ in r) == 15
    # Source 0 (25 samples, quota 50): exactly two passes per epoch, each sample once per pass, orders differ.
    s0 = [x for x in rows[0] if x[0] in (0, 2)]
    assert sorted(s0) == sorted([(0, i) for i in range(20)] * 2 + [(2, i) for i in range(5)] * 2)
    assert s0[:25] != s0[25:]
    # Source 1 (30 samples, quota 15): epochs 0 and 1 together read it once, then a new pass.
    s1 = [x for e in (0, 1) for x in rows[e] if x[0] == 1]
    assert sorted(s1) == [(1, i) for i in range(30)]
    assert sorted(x for e in (2, 3) for x in rows[e] if x[0] == 1) == [(1, i) for i in range(30)]
    assert [x for x in rows[2] if x[0] == 1] != [x for x in rows[0] if x[0] == 1]
    p = mixed(1)
    assert p.served(65) == [50, 15] and p.served(16) == [int(c) for c in mix_prefix(16, [50, 15])]


def test_mixed_ranks_split_each_global_batch_of_the_single_process_run() -> None:
    single = mixed(1, batch_size=8)
    ranks = [mixed(1, rank=r, world_size=2, batch_size=4) for r in range(2)]
    for k in range(single.steps):
        union = np.concatenate([np.stack(ranks[r].rows(ranks[r].batch_positions(k))) for r in range(2)], axis=1)
        assert np.array_equal(union, np.stack(single.rows(single.batch_positions(k))))
