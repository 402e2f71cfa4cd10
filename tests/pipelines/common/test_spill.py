"""Spill files on a local disk and on a real S3 API (moto's server on loopback): write, range reads, removal."""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common.spill import read_ranges, remove_work_dir, spill_path, write_file


@pytest.fixture()
def s3_root(s3_server):  # s3_server: tests/s3_server.py, a real S3 API on 127.0.0.1
    return s3_server.bucket("spill-test") + "/out"


def roundtrip(root: str) -> None:
    work = FileSystems.join(root, "_work")
    if "://" not in work:
        os.makedirs(work)
    paths = [spill_path(work, "docs", [bytes([i]) * 8]) for i in range(3)]
    assert len(set(paths)) == 3 and paths[0] == spill_path(work, "docs", [bytes([0]) * 8])
    for i, p in enumerate(paths):
        write_file(p, [b"header", b"-part-%d-" % i, b"tail"])
    write_file(FileSystems.join(root, "keep.txt"), [b"k"])
    assert read_ranges(paths[1], [(6, 8), (0, 6), (14, 4)]) == [b"-part-1-", b"header", b"tail"]
    with pytest.raises(OSError, match="truncated spill file"):
        read_ranges(paths[2], [(10, 100)])
    remove_work_dir(work)
    left = [m.path for m in FileSystems.match([FileSystems.join(root, "*")])[0].metadata_list]
    assert [p.rsplit("/", 1)[1] for p in left] == ["keep.txt"]
    remove_work_dir(work)  # already gone: no error


def test_spill_files_on_a_local_disk(tmp_path):
    roundtrip(str(tmp_path))


def test_spill_files_on_s3(s3_root):
    roundtrip(s3_root)


def test_spill_buffers_grow_only_where_files_would_be_too_many():
    from bertstream.pipelines.common.spill import MAX_SPILL_BYTES, MAX_SPILL_FILES, SPILL_BYTES, spill_bytes_for

    assert spill_bytes_for(0) == SPILL_BYTES
    assert spill_bytes_for(1 << 30) == SPILL_BYTES  # 1 GB: 64 files of 16 MB
    big = 150 << 30  # the instance shuffle of 20 GB at dupe 10
    assert SPILL_BYTES < spill_bytes_for(big) < MAX_SPILL_BYTES and big // spill_bytes_for(big) <= MAX_SPILL_FILES
    assert spill_bytes_for(10 << 40) == MAX_SPILL_BYTES
