import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from trainer.data.plan import EpochPlan, Lane, advance, interleave, lane_batches, split_lanes, steps_per_epoch

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
    return EpochPlan(
        COUNTS,
        epoch=epoch,
        seed=seed,
        shuffle=shuffle,
        window=window,
        batch_size=batch_size,
        world_size=world_size,
        rank=rank,
        drop_remainder=drop_remainder,
    )


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


def test_split_lanes_is_contiguous_and_balanced() -> None:
    lanes = split_lanes([(3, 10), (12, 14)], 3)
    assert [list(lane_batches(lane)) for lane in lanes] == [[3, 4, 5], [6, 7, 8], [9, 12, 13]]
    assert split_lanes([(0, 2)], 3) == [[(0, 1)], [(1, 2)], []]


def test_advance_continues_the_interleaved_order() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        lanes: list[Lane] = []
        start = 0
        for _ in range(int(rng.integers(1, 5))):
            n = int(rng.integers(0, 7))
            lanes.append([(start, start + n)] if n else [])
            start += n + int(rng.integers(0, 3))
        full = list(interleave(lanes))
        cursor = int(rng.integers(0, len(full) + 1))
        rest = advance(lanes, cursor)
        assert len(rest) == len(lanes)
        assert list(interleave(rest)) == full[cursor:]
        # and again from the advanced lanes (a second resume)
        c2 = int(rng.integers(0, len(full) - cursor + 1))
        assert list(interleave(advance(rest, c2))) == full[cursor + c2 :]


class _Lanes(IterableDataset):
    def __init__(self, lanes: list[Lane]) -> None:
        self.lanes = lanes

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        yield from lane_batches(self.lanes[0 if info is None else info.id])


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(
    "lanes",
    [
        [[(0, 5)], [(5, 8)], [(8, 9)]],  # uneven lanes: exhausted workers are skipped
        [[(4, 6)], [], [(0, 4), (7, 9)]],  # an empty lane; rotated, non-monotonic lanes
    ],
)
def test_torch_dataloader_yields_the_interleaved_order(lanes: list[Lane]) -> None:
    """The assumption the loader's state rests on, checked against torch itself."""
    got = [int(x) for x in DataLoader(_Lanes(lanes), batch_size=None, num_workers=len(lanes), prefetch_factor=3)]
    assert got == list(interleave(lanes))


def test_ranks_split_each_global_batch_of_the_single_process_run() -> None:
    counts = [37, 120, 5, 64]
    kw = dict(epoch=2, seed=9, shuffle=True, window=16, drop_remainder=True)
    single = EpochPlan(counts, batch_size=8, world_size=1, rank=0, **kw)
    ranks = [EpochPlan(counts, batch_size=4, world_size=2, rank=r, **kw) for r in range(2)]
    assert single.steps == ranks[0].steps == ranks[1].steps
    for k in range(single.steps):
        union = np.concatenate([p.batch_positions(k) for p in ranks])
        assert np.array_equal(union, single.batch_positions(k))
