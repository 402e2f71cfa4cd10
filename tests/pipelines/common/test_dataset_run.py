from __future__ import annotations

import pytest

from bertstream.cli.errors import ConfigError
from bertstream.pipelines.common.dataset_run import ShardSizing, existing_outputs, prepare_output
from bertstream.pipelines.common.runner import UsageError
from bertstream.pipelines.pretraining import pipeline as pretraining
from bertstream.pipelines.tasks import pipeline as tasks
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.vocab import VOCAB_FILENAME


def test_shard_sizing_clamps_the_count_each_side_asks_for():
    mb = 1 << 20
    assert [pretraining.SHARD_SIZING.num_shards(n * mb) for n in (0, 1, 256, 257, 6400)] == [4, 4, 4, 5, 100]
    assert [tasks.SHARD_SIZING.num_shards(n * mb) for n in (0, 1, 32, 33, 10_000)] == [1, 1, 1, 2, 4]
    with pytest.raises(ConfigError, match="at_most: must be >= at_least, got 2"):
        ShardSizing(bytes_per_shard=1, at_least=3, at_most=2)


def test_prepare_output_refuses_a_dataset_and_clears_it_manifest_first(tmp_path):
    def is_output(name: str) -> bool:
        return name in (MANIFEST_NAME, VOCAB_FILENAME) or name.startswith("shard-")

    (tmp_path / "notes.txt").write_text("x")
    for overwrite in (False, True):  # someone else's file: refused, overwrite or not, and nothing removed
        with pytest.raises(UsageError, match=r"not a dataset's \(notes.txt\)"):
            prepare_output(str(tmp_path), overwrite, is_output)
    (tmp_path / "notes.txt").unlink()
    for name in (MANIFEST_NAME, VOCAB_FILENAME, "shard-0"):
        (tmp_path / name).write_text("x")
    assert [p.rsplit("/", 1)[-1] for p in existing_outputs(str(tmp_path), is_output)] == [
        MANIFEST_NAME,
        "shard-0",
        VOCAB_FILENAME,
    ]
    with pytest.raises(UsageError, match="already holds a dataset") as e:
        prepare_output(str(tmp_path), False, is_output)
    assert e.value.param == "output"
    prepare_output(str(tmp_path), True, is_output)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_vocabulary_alone_is_not_a_dataset_and_is_replaced(tmp_path):
    (tmp_path / VOCAB_FILENAME).write_text("old")
    prepare_output(str(tmp_path), False, lambda name: False)  # even when the side does not list it
    assert not (tmp_path / VOCAB_FILENAME).exists()
