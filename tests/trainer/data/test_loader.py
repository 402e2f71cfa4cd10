import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.lib.synthetic_shards import make_instances, write_dataset
from bertstream.trainer.data import DataConfig, PretrainingLoader, ShardError, VocabMismatchError
from tests.trainer.data.conftest import Dataset, uint64
from tests.trainer.shard_fixtures import copy_to_fsspec

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

BATCH = 8


def make(
    *paths: Path | str, world_size: int = 1, rank: int = 0, expected: str | None = None, **kw: object
) -> PretrainingLoader:
    kw = {"batch_size": BATCH, "shuffle_buffer": 40, "seed": 11, **kw}
    cfg = DataConfig(paths=tuple(str(p) for p in paths), **kw)  # type: ignore[arg-type]
    return PretrainingLoader(cfg, expected_vocab_sha256=expected, world_size=world_size, rank=rank)


def epoch_ids(loader: PretrainingLoader) -> list[list[int]]:
    return [[uint64(int(x)) for x in b["instance_ids"]] for b in loader]


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


@pytest.mark.parametrize("fmt", ["arrow", "webdataset"])
@pytest.mark.parametrize(("world_size", "workers"), [(1, 0), (2, 2), (3, 0)])
def test_each_sample_once_per_epoch_over_ranks_and_workers(
    uneven: Dataset, fmt: str, world_size: int, workers: int
) -> None:
    loaders = [
        make(uneven.path, world_size=world_size, rank=r, format=fmt, num_workers=workers, expected=uneven.vocab.sha256)
        for r in range(world_size)
    ]
    per_rank = [epoch_ids(ld) for ld in loaders]
    steps = 311 // (world_size * BATCH)
    assert [len(b) for b in per_rank] == [steps] * world_size  # no DDP hang
    assert all(len(b) == BATCH for batches in per_rank for b in batches)
    seen = [i for batches in per_rank for i in flat(batches)]
    assert len(seen) == len(set(seen)) == 311 - loaders[0].dropped_per_epoch
    assert loaders[0].dropped_per_epoch == 311 % (world_size * BATCH)
    assert set(seen) <= uneven.ids
    assert all(ld.epoch == 1 and ld.steps_per_epoch == steps for ld in loaders)


def test_batches_carry_the_written_instances(uneven: Dataset) -> None:
    by_id = uneven.instances.by_id()
    for b in make(uneven.path, format="webdataset", batch_size=16):
        for i, iid in enumerate(b["instance_ids"].tolist()):
            row = uneven.instances.row(by_id[uint64(iid)])
            n, m = len(row["input_ids"]), len(row["masked_lm_ids"])
            assert b["input_ids"][i, :n].tolist() == row["input_ids"].tolist()
            assert b["attention_mask"][i].sum() == n and b["input_ids"].shape[1] % 8 == 0
            assert b["token_type_ids"][i, :n].tolist() == [0] * row["segment_a_length"] + [1] * (
                n - row["segment_a_length"]
            )
            assert b["masked_lm_positions"][i, :m].tolist() == row["masked_lm_positions"].tolist()
            assert b["masked_lm_ids"][i, :m].tolist() == row["masked_lm_ids"].tolist()
            assert b["masked_lm_weights"][i].sum() == m
            assert b["next_sentence_labels"][i] == row["next_sentence_label"]


def test_formats_and_locations_give_the_same_stream(uneven: Dataset) -> None:
    """The order depends on manifest counts, seed and the run's lanes (its first worker count), not on how
    shards are stored."""
    a = epoch_ids(make(uneven.path, format="arrow"))
    assert epoch_ids(make(uneven.path, format="webdataset")) == a
    a2 = epoch_ids(make(uneven.path, format="arrow", num_workers=2))
    assert a2 != a and sorted(flat(a2)) == sorted(flat(a))  # workers own contiguous lanes of batches
    url = f"memory://bertstream-test-{id(a)}"
    copy_to_fsspec(uneven.path, url)
    assert epoch_ids(make(url, format="arrow")) == a
    assert epoch_ids(make(url, format="webdataset", num_workers=2)) == a2


def test_order_differs_per_epoch_and_repeats_per_seed(uneven: Dataset) -> None:
    ld = make(uneven.path)
    e0, e1 = epoch_ids(ld), epoch_ids(ld)
    assert ld.epoch == 2
    assert e0 != e1 and set(flat(e0)) != set(flat(e1))  # the dropped remainder moves too
    assert epoch_ids(make(uneven.path)) == e0
    assert epoch_ids(make(uneven.path, seed=12)) != e0
    again = make(uneven.path)
    again.set_epoch(1)
    assert epoch_ids(again) == e1


def _resume(make_loader, stop_after: int, make_resumed=None) -> tuple[list[list[int]], list[list[int]], dict]:  # noqa: ANN001
    first = make_loader()
    head = []
    for b in itertools.islice(iter(first), stop_after):
        head.append([uint64(int(x)) for x in b["instance_ids"]])
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    resumed = (make_resumed or make_loader)()
    resumed.load_state_dict(state)
    return head, epoch_ids(resumed), state


@pytest.mark.parametrize("fmt", ["arrow", "webdataset"])
@pytest.mark.parametrize(
    ("workers", "world_size", "stop_after"), [(0, 1, 7), (2, 1, 7), (2, 1, 8), (2, 2, 5), (0, 2, 1)]
)
def test_resume_mid_epoch_is_exact(uneven: Dataset, fmt: str, workers: int, world_size: int, stop_after: int) -> None:
    for rank in range(world_size):

        def mk(rank: int = rank) -> PretrainingLoader:
            return make(
                uneven.path, format=fmt, num_workers=workers, world_size=world_size, rank=rank, prefetch_factor=4
            )

        full = epoch_ids(mk())
        head, tail, state = _resume(mk, stop_after)
        assert state["batches_consumed"] == stop_after  # yielded, not prefetched by workers
        assert len(json.dumps(state)) < 600
        assert head + tail == full


@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 2), (2, 3)])
def test_resume_with_another_worker_count_continues_the_same_order(uneven: Dataset, before: int, after: int) -> None:
    ref = make(uneven.path, num_workers=before)
    full = [epoch_ids(ref), epoch_ids(ref)]
    head, tail, _ = _resume(
        lambda: make(uneven.path, num_workers=before), 13, lambda: make(uneven.path, num_workers=after)
    )
    assert head + tail == full[0]
    resumed = make(uneven.path, num_workers=after)
    resumed.load_state_dict(make(uneven.path, num_workers=before).state_dict())
    assert epoch_ids(resumed) == full[0] and epoch_ids(resumed) == full[1]  # the run's lanes, every epoch


def test_a_v1_position_of_an_uninterrupted_run_continues_exactly(uneven: Dataset) -> None:
    full = epoch_ids(make(uneven.path, num_workers=2))
    v2 = make(uneven.path, num_workers=2).state_dict()
    # What the v1 loader saved after 13 of 38 batches with 2 workers: the lanes [0, 19) and [19, 38) advanced
    # by 7 and 6 batches, the one due next first.
    v1 = {k: v2[k] for k in ("format", "epoch", "seed", "world_size", "batch_size", "steps_per_epoch", "order")}
    v1.update(version=1, batches_consumed=13, lanes=[[[25, 38]], [[7, 19]]])
    ld = make(uneven.path, num_workers=0)
    ld.load_state_dict(v1)
    assert epoch_ids(ld) == full[13:]
    with pytest.raises(ValueError, match="worker-count change"):
        make(uneven.path).load_state_dict({**v1, "lanes": [[[13, 26]], [[26, 38]]]})  # re-split by a resume


def test_resume_twice_and_across_the_epoch_end(uneven: Dataset) -> None:
    ref = make(uneven.path, num_workers=2)
    full = [epoch_ids(ref), epoch_ids(ref)]
    ld = make(uneven.path, num_workers=2)
    got = []
    it = iter(ld)
    got += [next(it)["instance_ids"] for _ in range(5)]
    ld2 = make(uneven.path, num_workers=2)
    ld2.load_state_dict(ld.state_dict())
    it = iter(ld2)
    got += [next(it)["instance_ids"] for _ in range(ld2.remaining_steps)]  # the last batch, not StopIteration
    state = ld2.state_dict()
    assert (state["epoch"], state["batches_consumed"]) == (0, ld2.steps_per_epoch)
    ld3 = make(uneven.path, num_workers=2)
    ld3.load_state_dict(state)
    got_ids = [[uint64(int(x)) for x in b] for b in got]
    assert got_ids == full[0]
    assert epoch_ids(ld3) == full[1] and ld3.epoch == 2


def test_state_counts_batches_handed_out_not_prefetched(uneven: Dataset) -> None:
    ld = make(uneven.path, num_workers=2, prefetch_factor=8)
    it = iter(ld)
    next(it)
    next(it)
    assert ld.state_dict()["batches_consumed"] == 2 and ld.batches_consumed == 2


def test_length_bucketing(uneven: Dataset) -> None:
    plain = make(uneven.path, batch_size=4, shuffle_buffer=311)
    bucketed = make(uneven.path, batch_size=4, shuffle_buffer=311, length_bucketing=True, bucket_batches=8)

    def padding(batches: list[dict[str, torch.Tensor]]) -> int:
        return sum(int((b["attention_mask"] == 0).sum()) for b in batches)

    batches = list(bucketed)
    assert padding(batches) < 0.5 * padding(list(plain))
    ids = [uint64(int(x)) for b in batches for x in b["instance_ids"]]
    assert len(ids) == len(set(ids)) == 311 - 311 % 4

    def mk() -> PretrainingLoader:
        return make(
            uneven.path,
            batch_size=4,
            shuffle_buffer=311,
            length_bucketing=True,
            bucket_batches=8,
            num_workers=2,
        )

    full = epoch_ids(mk())
    head, tail, _ = _resume(mk, 11)
    assert head + tail == full


def test_without_drop_remainder_every_sample_is_served(uneven: Dataset) -> None:
    loaders = [make(uneven.path, world_size=2, rank=r, drop_remainder=False) for r in range(2)]
    seen = [i for ld in loaders for i in flat(epoch_ids(ld))]
    assert set(seen) == uneven.ids
    assert len(seen) - 311 == loaders[0].repeated_per_epoch == 20 * 16 - 311
    assert loaders[0].dropped_per_epoch == 0


def test_fewer_shards_than_workers(tmp_path: Path, vocab) -> None:  # noqa: ANN001
    inst = make_instances(40, seed=9, vocab=vocab)
    write_dataset(tmp_path, inst, (40,), vocab=vocab, formats=("webdataset",))
    ids = flat(epoch_ids(make(tmp_path, num_workers=2, batch_size=4)))
    assert sorted(ids) == sorted(int(i) for i in inst.instance_id)


def test_several_directories(uneven: Dataset, second: Dataset) -> None:
    ids = flat(epoch_ids(make(uneven.path, second.path, batch_size=1, shuffle=False)))
    assert set(ids) == uneven.ids | second.ids and len(ids) == 361


def test_vocab_mismatch_through_the_loader(uneven: Dataset) -> None:
    with pytest.raises(VocabMismatchError, match="model's vocab"):
        make(uneven.path, expected="0" * 64)


@pytest.mark.parametrize("workers", [0, 2])
def test_corrupt_shard_found_while_reading_names_path_and_sha(uneven: Dataset, tmp_path: Path, workers: int) -> None:
    d = tmp_path / "d"
    shutil.copytree(uneven.path, d)
    victim = d / "pretrain-00002-of-00006.tar"
    data = bytearray(victim.read_bytes())
    data[700] ^= 1
    victim.write_bytes(bytes(data))
    sha = json.loads((d / "manifest.json").read_text())["shards"][8]["sha256"]
    ld = make(d, format="webdataset", num_workers=workers)
    with pytest.raises(ShardError) as e:
        epoch_ids(ld)
    assert str(victim) in str(e.value) and sha in str(e.value)
    skipping = make(d, format="webdataset", num_workers=workers, skip_corrupt=True)
    ids = flat(epoch_ids(skipping))
    assert skipping.skipped_samples == 5 and skipping.skipped_shards[0][0] == str(victim)
    assert len(ids) == len(set(ids)) == 306 - 306 % BATCH
    assert skipping.num_samples == 306


def test_state_mismatches_are_refused(uneven: Dataset) -> None:
    state = make(uneven.path).state_dict()
    with pytest.raises(ValueError, match="seed=11, this loader has 12"):
        make(uneven.path, seed=12).load_state_dict(state)
    with pytest.raises(ValueError, match="global batch of 1 x 8 = 8, this loader has 2 x 8 = 16"):
        make(uneven.path, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="order"):
        make(uneven.path, shuffle_buffer=41).load_state_dict(state)
    with pytest.raises(ValueError, match="not a bertstream.data_position"):
        make(uneven.path).load_state_dict({"epoch": 0})


def test_any_ranks_state_fits_every_rank(uneven: Dataset) -> None:
    r0, r1 = (make(uneven.path, world_size=2, rank=r, num_workers=2) for r in range(2))
    full1 = epoch_ids(make(uneven.path, world_size=2, rank=1, num_workers=2))
    it = iter(r0)
    for _ in range(4):
        next(it)
    r1.load_state_dict(r0.state_dict())
    assert epoch_ids(r1) == full1[4:]


def test_stale_iterators_and_small_datasets(uneven: Dataset) -> None:
    ld = make(uneven.path)
    old = iter(ld)
    next(old)
    new = iter(ld)
    with pytest.raises(RuntimeError, match="stale"):
        next(old)
    assert len(list(new)) == ld.steps_per_epoch - 1 == len(ld) - 1
    with pytest.raises(ValueError, match="fewer than one global batch"):
        make(uneven.path, batch_size=200, world_size=2)


def test_pin_memory_and_tensor_types(uneven: Dataset) -> None:
    b = next(iter(make(uneven.path, num_workers=2)))
    assert b["input_ids"].dtype == torch.int64 and b["masked_lm_weights"].dtype == torch.float32
    assert b["input_ids"].is_contiguous() and b["input_ids"].shape[0] == BATCH
    assert np.all(b["input_ids"].numpy()[b["attention_mask"].numpy() == 0] == 0)


def test_iterating_leaves_the_global_torch_rng_alone(tmp_path) -> None:
    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset
    from bertstream.trainer.data import DataConfig, PretrainingLoader

    vocab = bert_like_vocab(2000)
    write_dataset(tmp_path / "d", make_instances(80, vocab=vocab), [40, 40], vocab=vocab, formats=("arrow",))
    for workers in (0, 2):
        loader = PretrainingLoader(
            DataConfig(paths=(str(tmp_path / "d"),), batch_size=8, num_workers=workers), expected_vocab_sha256=None
        )
        before = torch.get_rng_state()
        for _ in loader:
            pass
        assert torch.equal(torch.get_rng_state(), before), workers


def _global_batches(loaders: list[PretrainingLoader], n: int | None = None) -> list[list[int]]:
    """Global batches (rank slices joined in rank order) of the next ``n`` steps (default: rest of the epoch)."""
    per_rank = [list(itertools.islice(iter(ld), n)) for ld in loaders]
    return [flat([[uint64(int(x)) for x in b["instance_ids"]] for b in step]) for step in zip(*per_rank)]


@pytest.mark.parametrize("bucketing", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(("before", "after"), [((2, 4, 2), (1, 8, 0)), ((1, 8, 3), (2, 4, 1)), ((4, 2, 0), (2, 4, 2))])
def test_elastic_resume_continues_the_global_order(
    uneven: Dataset, second: Dataset, bucketing: bool, weighted: bool, before: tuple, after: tuple
) -> None:
    """W x B ranks (x workers) stopped mid-epoch, resumed on W' x B' with W*B == W'*B': the same global
    batches, step for step, as the run that never stopped, into the next epoch."""
    paths = (f"{uneven.path}:0.7", f"{second.path}:0.3") if weighted else (str(uneven.path),)
    from bertstream.trainer.data.config import split_data_args

    dirs, weights = split_data_args(paths)

    def ranks(world: int, batch: int, workers: int) -> list[PretrainingLoader]:
        kw = {"length_bucketing": bucketing, "bucket_batches": 4, "weights": weights}
        return [
            make(*dirs, world_size=world, rank=r, batch_size=batch, num_workers=workers, **kw) for r in range(world)
        ]

    ref = ranks(*before)
    steps = ref[0].steps_per_epoch
    whole = _global_batches(ref) + _global_batches(ref)  # two epochs
    first = ranks(*before)
    head = _global_batches(first, 9)
    state = json.loads(json.dumps(first[1 % len(first)].state_dict()))
    assert state["samples_consumed"] == 9 * 8 and state["epoch"] == 0
    resumed = ranks(*after)
    for ld in resumed:
        ld.load_state_dict(state)
    assert resumed[0].steps_per_epoch == steps
    rest = _global_batches(resumed) + _global_batches(resumed)[:3]
    assert head + rest == whole[: 9 + len(rest)]


def test_weighted_mix_counts_and_epoch(uneven: Dataset, second: Dataset) -> None:
    # uneven (311) weighs most: an epoch reads it once; second (50) gets round(311 * 0.3 / 0.7) = 133 a epoch.
    ld = make(uneven.path, second.path, weights=(0.7, 0.3))
    assert ld.epoch_samples == 311 + 133 and ld.steps_per_epoch == 444 // BATCH
    batches = epoch_ids(ld)
    ids = flat(batches)
    from_first = [i for i in ids if i in uneven.ids]
    from_second = [i for i in ids if i in second.ids]
    assert len(ids) == 55 * BATCH and len(from_first) + len(from_second) == len(ids)
    assert len(set(from_first)) == len(from_first)  # the heaviest: each sample at most once an epoch
    counts = ld.samples_by_dataset()
    assert counts == {str(uneven.path): len(from_first), str(second.path): len(from_second)}
    assert abs(len(from_second) - 133) <= 4  # at most the dropped remainder of 4 is short
    # second wraps: read 2 or 3 times each within the epoch (133 = 2 * 50 + 33)
    assert {from_second.count(i) for i in second.ids} <= {2, 3} and len(set(from_second)) == 50
    # dealt evenly: every batch of 8 holds 5 or 6 (of 5.6) from the heaviest
    assert {sum(i in uneven.ids for i in b) for b in batches} <= {5, 6}
    epoch_ids(ld)
    assert sum(ld.samples_by_dataset().values()) == 2 * 55 * BATCH


def test_weights_are_checked(uneven: Dataset, second: Dataset) -> None:
    with pytest.raises(ValueError, match="2 weights for 1 paths"):
        make(uneven.path, weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="weights must be finite and > 0"):
        make(uneven.path, second.path, weights=(1.0, 0.0))
    with pytest.raises(ValueError, match="gives it no sample per epoch"):
        make(uneven.path, second.path, weights=(1.0, 0.001))
    state = make(uneven.path, second.path, weights=(0.5, 0.5)).state_dict()
    with pytest.raises(ValueError, match="order.*weights"):
        make(uneven.path, second.path, weights=(0.7, 0.3)).load_state_dict(state)


def test_one_set_of_workers_serves_every_epoch_in_the_same_order(uneven: Dataset, monkeypatch) -> None:  # noqa: ANN001
    """Workers live across epochs (re-creating them stalled each epoch's start): 3 workers over 38-batch epochs
    (not a multiple) give the order of a loader without workers (the same 3 lanes), epoch after epoch, and a
    resume in the second epoch continues it exactly; each batch's counts, born in the worker, are its tensors'."""
    import bertstream.trainer.data.loader as loader_module

    ref = make(uneven.path, num_workers=0)
    ref.load_state_dict(make(uneven.path, num_workers=3).state_dict())  # 3 lanes, read in the main process
    full = [epoch_ids(ref) for _ in range(3)]
    made = []

    class Counted(loader_module.DataLoader):
        def __init__(self, *args, **kw) -> None:  # noqa: ANN002, ANN003
            made.append(1)
            super().__init__(*args, **kw)

    monkeypatch.setattr(loader_module, "DataLoader", Counted)
    ld = make(uneven.path, num_workers=3)
    got, state = [], None
    for epoch in range(3):
        batches = []
        for b in ld:
            batches.append([uint64(int(x)) for x in b["instance_ids"]])
            c = b.counts
            assert (c.masked, c.sequences, c.tokens) == (
                int(b["masked_lm_weights"].sum()),
                len(b["instance_ids"]),
                int(b["attention_mask"].sum()),
            )
            if epoch == 1 and len(batches) == 11:
                state = json.loads(json.dumps(ld.state_dict()))
        got.append(batches)
    ld.close()
    assert got == full
    assert len(made) == 1  # one DataLoader (one set of workers) for the three epochs
    resumed = make(uneven.path, num_workers=3)
    resumed.load_state_dict(state)
    assert epoch_ids(resumed) == full[1][11:] and epoch_ids(resumed) == full[2]
    resumed.close()


def test_a_weighted_folder_left_without_samples_is_refused_by_name(
    uneven: Dataset, second: Dataset, tmp_path: Path
) -> None:
    # Each weighted folder is its own dataset, dealt into every batch: one whose shards are all skipped as corrupt
    # has nothing to deal. Opening the catalog refuses it, naming the folder.
    d = tmp_path / "second"
    shutil.copytree(second.path, d)
    for shard in (*d.glob("*.tar"), *d.glob("*.arrow")):
        shard.write_bytes(shard.read_bytes()[:-1])  # every shard of it fails the manifest's size
    with pytest.raises(ShardError, match=f"^no usable shards in weighted --data {d}$"):
        make(uneven.path, d, weights=(0.7, 0.3), skip_corrupt=True)
    assert make(uneven.path, second.path, weights=(0.7, 0.3), skip_corrupt=True).catalog.folders == (
        str(uneven.path),
        str(second.path),
    )
