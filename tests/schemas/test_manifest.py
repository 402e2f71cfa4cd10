"""The manifest refuses shard paths that leave the dataset folder."""

from __future__ import annotations

import pytest

from schemas.manifest import ShardInfo
from schemas.version import SchemaError

SHA = "0" * 64


@pytest.mark.parametrize(
    "path",
    [
        "../other/pretrain-00000-of-00001.arrow",
        "a/../../x.arrow",
        "/etc/passwd",
        "\\\\server\\share\\x.arrow",
        "C:\\data\\x.arrow",
        "s3://bucket/x.arrow",
        "",
    ],
)
def test_shard_paths_outside_the_dataset_folder_are_refused(path):
    with pytest.raises(SchemaError, match="leaves the dataset folder"):
        ShardInfo(path=path, format="arrow", count=1, bytes=1, sha256=SHA)


@pytest.mark.parametrize("path", ["pretrain-00000-of-00004.arrow", "train/part-00000-of-00001.tar", "a..b.arrow"])
def test_relative_shard_paths_are_accepted(path):
    assert ShardInfo(path=path, format="arrow", count=1, bytes=1, sha256=SHA).path == path
