"""Spill files on a local disk and on a real S3 API (moto's server on loopback): write, range reads, removal."""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystems import FileSystems

from pipelines.spill import read_ranges, remove_work_dir, spill_path, write_file


@pytest.fixture()
def s3_root(monkeypatch):
    moto_server = pytest.importorskip("moto.server", reason="needs moto[server] (the test extra)")
    import boto3
    from apache_beam.options.pipeline_options import PipelineOptions

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=url).create_bucket(Bucket="spill-test")
    FileSystems.set_options(PipelineOptions([f"--s3_endpoint_url={url}", "--s3_region_name=us-east-1",
                                             "--s3_access_key_id=test", "--s3_secret_access_key=test"]))
    try:
        yield "s3://spill-test/out"
    finally:
        FileSystems.set_options(PipelineOptions([]))
        server.stop()


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
    from pipelines.spill import MAX_SPILL_BYTES, MAX_SPILL_FILES, SPILL_BYTES, spill_bytes_for

    assert spill_bytes_for(0) == SPILL_BYTES
    assert spill_bytes_for(1 << 30) == SPILL_BYTES  # 1 GB: 64 files of 16 MB
    big = 150 << 30  # the instance shuffle of 20 GB at dupe 10
    assert SPILL_BYTES < spill_bytes_for(big) < MAX_SPILL_BYTES and big // spill_bytes_for(big) <= MAX_SPILL_FILES
    assert spill_bytes_for(10 << 40) == MAX_SPILL_BYTES
