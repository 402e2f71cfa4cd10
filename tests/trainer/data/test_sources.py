import json
import shutil
from pathlib import Path

import pytest

from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import VocabMismatchError
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.refs import ShardError
from bertstream.trainer.data.sources import open_catalog
from tests.trainer.data.conftest import Dataset


def catalog(*paths: Path, fmt: str = "auto", expected: str | None = None, skip: bool = False, verify: str = "sha256"):  # noqa: ANN201
    config = DataConfig(paths=tuple(map(str, paths)), batch_size=1, format=fmt, skip_corrupt=skip, verify=verify)
    return open_catalog(config, expected_vocab_sha256=expected)


def copy(ds: Dataset, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(ds.path, dst)
    return dst


def test_catalog_follows_the_manifest(uneven: Dataset) -> None:
    cat = catalog(uneven.path, expected=uneven.vocab.sha256)
    assert [s.format for s in cat.shards] == ["arrow"] * 6
    assert [s.count for s in cat.shards] == [37, 120, 5, 0, 88, 61]
    assert cat.num_samples == 311 and cat.pad_id == 0 and cat.id_type == "uint16" and cat.vocab_size == 30522
    assert [s.format for s in catalog(uneven.path, fmt="webdataset").shards] == ["webdataset"] * 6


def test_two_directories_are_one_dataset(uneven: Dataset, second: Dataset) -> None:
    cat = catalog(uneven.path, second.path)
    assert cat.num_samples == 361
    assert [s.dataset for s in cat.shards] == [0] * 6 + [1] * 2


def test_vocab_must_match_the_model(uneven: Dataset) -> None:
    with pytest.raises(VocabMismatchError, match=f"{uneven.vocab.sha256}.*model's vocab is {'a' * 64}"):
        catalog(uneven.path, expected="a" * 64)


def test_vocab_must_match_across_directories(uneven: Dataset, tmp_path: Path) -> None:
    other = bert_like_vocab(30_000)
    write_dataset(tmp_path, make_instances(10, vocab=other), (10,), vocab=other)
    with pytest.raises(VocabMismatchError, match="differs from"):
        catalog(uneven.path, tmp_path)


def test_manifest_schema_version_is_checked(tmp_path: Path, vocab) -> None:  # noqa: ANN001
    write_dataset(tmp_path, make_instances(10, vocab=vocab), (10,), vocab=vocab, manifest_schema_version=2)
    with pytest.raises(SchemaError, match="schema version 2, this build reads 1"):
        catalog(tmp_path)


def test_shard_schema_version_fails_at_construction(tmp_path: Path, vocab) -> None:  # noqa: ANN001
    write_dataset(tmp_path, make_instances(10, vocab=vocab), (4, 6), vocab=vocab, shard_schema_version=2)
    with pytest.raises(SchemaError, match=r"pretrain-00000-of-00002\.arrow: schema version 2"):
        catalog(tmp_path)


def test_missing_manifest_and_wrong_kind(tmp_path: Path, uneven: Dataset) -> None:
    with pytest.raises(FileNotFoundError, match="no manifest"):
        catalog(tmp_path)
    d = copy(uneven, tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    m["kind"] = "squad"
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(SchemaError, match="'squad' dataset"):
        catalog(d)


def test_format_choice(uneven: Dataset, tmp_path: Path, vocab) -> None:  # noqa: ANN001
    write_dataset(tmp_path, make_instances(10, vocab=vocab), (10,), vocab=vocab, formats=("webdataset",))
    assert catalog(tmp_path).shards[0].format == "webdataset"  # auto falls back
    with pytest.raises(SchemaError, match="no arrow shards"):
        catalog(tmp_path, fmt="arrow")


def test_truncated_shard_fails_up_front_naming_path_and_sha(uneven: Dataset, tmp_path: Path) -> None:
    d = copy(uneven, tmp_path)
    victim = d / "pretrain-00004-of-00006.arrow"
    victim.write_bytes(victim.read_bytes()[:100])
    sha = json.loads((d / "manifest.json").read_text())["shards"][4]["sha256"]
    with pytest.raises(ShardError, match="truncated") as e:
        catalog(d)
    assert str(victim) in str(e.value) and sha in str(e.value)
    cat = catalog(d, skip=True)
    assert [s.count for s in cat.shards] == [37, 120, 5, 0, 61]
    assert cat.skipped_samples == 88 and "truncated" in cat.skipped[0][1]


def test_missing_shard(uneven: Dataset, tmp_path: Path) -> None:
    d = copy(uneven, tmp_path)
    (d / "pretrain-00001-of-00006.tar").unlink()
    with pytest.raises(ShardError, match="is missing"):
        catalog(d, fmt="webdataset")
    assert catalog(d, fmt="webdataset", skip=True).skipped_samples == 120


def test_content_corruption_is_skipped_up_front_only_with_skip_corrupt(uneven: Dataset, tmp_path: Path) -> None:
    d = copy(uneven, tmp_path)
    victim = d / "pretrain-00001-of-00006.tar"
    data = bytearray(victim.read_bytes())
    data[2000] ^= 1
    victim.write_bytes(bytes(data))
    assert catalog(d, fmt="webdataset").num_samples == 311  # found later, when the shard is opened
    cat = catalog(d, fmt="webdataset", skip=True)
    assert cat.verified and cat.skipped_samples == 120 and "hashes to" in cat.skipped[0][1]
    assert catalog(d, fmt="webdataset", skip=True, verify="size").skipped == ()


def test_fingerprint_ignores_where_the_data_lives(uneven: Dataset, tmp_path: Path) -> None:
    assert catalog(uneven.path).fingerprint == catalog(copy(uneven, tmp_path)).fingerprint
    assert catalog(uneven.path).fingerprint != catalog(uneven.path, fmt="webdataset").fingerprint


def test_a_dataset_is_its_content_a_copy_is_refused(uneven: Dataset, second: Dataset, tmp_path: Path) -> None:
    """Told apart by resolved path, a byte copy given as a second --data trained on both (issue 33)."""
    dup = copy(uneven, tmp_path)
    with pytest.raises(SchemaError, match=f"^{dup}: holds the same shard as {uneven.path} .*given twice"):
        catalog(uneven.path, dup, verify="size")
    assert catalog(uneven.path, second.path, verify="size").num_samples == 361  # distinct datasets still mix
