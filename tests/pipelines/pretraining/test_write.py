"""The instance shuffle by reference: spill files ordered by (shard, key), read back per shard."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.common.spill import write_file
from bertstream.pipelines.pretraining.stats import StatsSpec
from bertstream.pipelines.pretraining.write import (
    ShardSpec,
    WriteSpec,
    _SpillShardsFn,
    _take_compiled,
    _WriteShardFn,
    encode_shards,
    order_shard,
    read_shard,
    shuffle_keys,
)


def random_batch(n: int, seed: int, id_base: int = 0) -> InstanceBatch:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 129, n)
    plens = rng.integers(1, 21, n)
    return InstanceBatch(
        instance_ids=(np.arange(n, dtype=np.uint64) * np.uint64(7919) + np.uint64(id_base)),
        ids=rng.integers(0, 30000, int(lengths.sum())).astype(np.uint16),
        offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        segment_a_length=rng.integers(2, 60, n).astype(np.int16),
        next_sentence_label=rng.integers(0, 2, n).astype(np.int8),
        positions=(1 + rng.random(int(plens.sum())) * (np.repeat(lengths, plens) - 2)).astype(np.uint16),
        labels=rng.integers(0, 30000, int(plens.sum())).astype(np.uint16),
        pred_offsets=np.concatenate(([0], np.cumsum(plens))).astype(np.int64),
    )


def same(a: InstanceBatch, b: InstanceBatch) -> bool:
    return a.to_bytes() == b.to_bytes()


def test_slice_equals_take_of_a_range():
    b = random_batch(300, 1)
    assert same(b.slice(40, 220), b.take(np.arange(40, 220)))
    assert len(b.slice(5, 5)) == 0


@pytest.mark.parametrize("num_shards", [1, 4, 13])
def test_shards_read_back_from_spill_files_equal_a_sort_of_everything(tmp_path, num_shards):
    batches = [random_batch(500 + 37 * i, i, id_base=10**6 * i) for i in range(6)]
    parts: dict[int, list] = {}
    for i in range(0, 6, 2):  # three spill files, two batches each
        path = str(tmp_path / f"spill{i}.bin")
        chunks, offset = [], 0
        for shard, data in encode_shards(InstanceBatch.concat(batches[i : i + 2]), num_shards, seed=5):
            parts.setdefault(shard, []).append((path, (offset, len(data))))
            offset += len(data)
            chunks.append(data)
        write_file(path, chunks)
    everything = InstanceBatch.concat(batches)
    shard_of = shuffle_keys(everything.instance_ids, 5) % np.uint64(num_shards)
    assert sorted(parts) == sorted(set(shard_of.tolist()))
    for s, ps in parts.items():
        expected = order_shard([everything.take(np.flatnonzero(shard_of == s))], 5)
        assert same(read_shard(ps, 5), expected)
        keys = shuffle_keys(read_shard(ps, 5).instance_ids, 5)
        assert (np.diff(keys.astype(np.float64)) >= 0).all()


@pytest.mark.parametrize("num_shards,per_block", [(4, 1), (600, 3)])
def test_the_spill_fn_emits_one_reference_per_block_and_file(tmp_path, monkeypatch, num_shards, per_block):
    import bertstream.pipelines.pretraining.write as W
    from bertstream.pipelines.common.spill import keys_per_block

    assert keys_per_block(num_shards) == per_block
    spec = shard_spec(tmp_path, 1000, num_shards=num_shards, seed=3, compression="none")
    fn = _SpillShardsFn(dataclasses.replace(spec, work_dir=str(tmp_path), spill_bytes=100_000))
    fn.start_bundle()
    refs = [r for i in range(8) for r in fn.process(random_batch(400, i, 10**6 * i))]
    refs += [w.value for w in fn.finish_bundle()]
    files = {path for _, (path, _) in refs}
    blocks = -(-num_shards // per_block)
    assert len(files) >= 4 and len(refs) <= blocks * len(files)
    by_block: dict[int, list] = {}
    for b, part in refs:
        by_block.setdefault(b, []).append(part)
    seen = []
    for b, parts in by_block.items():
        for i in range(per_block):
            found = W.shard_parts(parts, i) if b * per_block + i < num_shards else []
            if found:
                batch = read_shard(found, 3)
                shard = shuffle_keys(batch.instance_ids, 3) % np.uint64(num_shards)
                assert (shard == b * per_block + i).all()
                seen.extend(batch.instance_ids.tolist())
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 8 * 400


def test_a_batch_processed_twice_is_an_error_not_a_duplicate(tmp_path):
    b = random_batch(50, 2)
    with pytest.raises(ValueError, match="duplicate instance ids"):
        order_shard([b, b], 1)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_the_compiled_take_gives_batch_take_s_arrays(dtype):
    b = random_batch(500, 3)
    b.ids, b.labels = b.ids.astype(dtype), b.labels.astype(dtype)
    rng = np.random.default_rng(0)
    for index in (rng.permutation(500), rng.integers(0, 500, 80), np.arange(0), np.array([499, 0, 499])):
        want, got = b.take(index), _take_compiled(b, index)
        assert same(got, want) and got.ids.dtype == want.ids.dtype == dtype


def test_the_compiled_take_refuses_rows_and_offsets_outside_the_batch():
    b = random_batch(20, 4)
    with pytest.raises(IndexError):
        _take_compiled(b, np.array([20]))
    b.offsets = b.offsets.copy()
    b.offsets[-1] += 1  # a corrupt spill part: the last row would end past the ids
    with pytest.raises(ValueError, match="outside the batch"):
        _take_compiled(b, np.array([19]))


def shard_spec(tmp_path, batch_rows: int, num_shards: int = 1, seed: int = 5, compression: str = "zstd") -> WriteSpec:
    shards = ShardSpec(
        output_dir=str(tmp_path),
        num_shards=num_shards,
        seed=seed,
        formats=("arrow",),
        id_type="uint16",
        vocab_sha256="0" * 64,
        parameters={},
        compression=compression,
        batch_rows=batch_rows,
    )
    stats = StatsSpec(mask_id=4, max_seq_length=128, max_predictions=20, masked_lm_prob=0.15, whole_word=False)
    return WriteSpec(shards=shards, stats=stats, work_dir=str(tmp_path / "work"))


def test_the_shard_written_a_chunk_behind_is_the_shard_written_in_line(tmp_path):
    batch = random_batch(700, 6)
    (tmp_path / "chunks").mkdir()
    (tmp_path / "one").mkdir()
    by_chunks = _WriteShardFn(shard_spec(tmp_path / "chunks", 64)).write(0, batch)  # 11 chunks, on the writer's thread
    [writer] = shard_spec(tmp_path / "one", 64).shards.writers(0)
    ordered = order_shard([batch], 5)
    with writer:  # the same chunks, written on this thread as they come
        for start in range(0, 700, 64):
            writer.write(ordered.take(np.arange(start, min(start + 64, 700))))
    assert by_chunks["files"] == [writer.written()]
    assert by_chunks["stats"]["instances"] == 700


def test_a_writer_error_on_its_thread_fails_the_shard_and_leaves_no_file(tmp_path, monkeypatch):
    from bertstream.pipelines.common.shards import ArrowShardWriter

    real, calls = ArrowShardWriter.write, []

    def failing(self, chunk):
        calls.append(len(chunk))
        if len(calls) == 3:
            raise OSError("disk full")
        real(self, chunk)

    monkeypatch.setattr(ArrowShardWriter, "write", failing)
    with pytest.raises(OSError, match="disk full"):
        _WriteShardFn(shard_spec(tmp_path, 64)).write(0, random_batch(700, 7))
    assert len(calls) <= 4  # stopped a chunk or so after the error, not at the end of the shard
    assert not list(tmp_path.glob("pretrain-*"))  # no shard, no temporary file
