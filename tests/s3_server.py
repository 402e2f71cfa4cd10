"""A real S3 API on loopback for the tests: moto's ``ThreadedMotoServer`` (``moto[server]``, the test extra).

``s3_server`` (a fixture, imported by ``tests/conftest.py``) starts one server on 127.0.0.1, port 0, sets the
environment that boto3, botocore and s3fs read (``AWS_ENDPOINT_URL``, test credentials, bounded retries and
timeouts) and points Beam's S3 filesystem at it; it yields an :class:`S3Server` and stops everything after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

REGION = "us-east-1"
KEY = SECRET = "test"


@dataclass
class S3Server:
    url: str  # http://127.0.0.1:PORT
    server: Any  # the ThreadedMotoServer
    buckets: list[str] = field(default_factory=list)

    @property
    def beam_args(self) -> list[str]:
        """Beam pipeline options for this endpoint (what a user passes to ``bertprep`` after its own flags);
        the credentials come from the environment, as README's recipe says, not from options."""
        return [f"--s3_endpoint_url={self.url}", f"--s3_region_name={REGION}"]

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=REGION,
            config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}),
        )

    def bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return f"s3://{name}"

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture()
def s3_server(monkeypatch):
    moto_server = pytest.importorskip("moto.server", reason="needs moto[server] (pip install -e '.[test]')")
    pytest.importorskip("boto3", reason="needs boto3 (brought by moto[server], the test extra)")
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    s = S3Server(url=f"http://{host}:{port}", server=server)
    _reset(s.url)  # moto keeps its buckets in process-wide state: every test starts with an empty store
    env = {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL": s.url,  # botocore >= 1.31, and so s3fs, read it
        # bounded waits: a dead endpoint fails after a few quick retries, never hangs
        "AWS_MAX_ATTEMPTS": "3",
        "AWS_RETRY_MODE": "standard",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    FileSystems.set_options(PipelineOptions(s.beam_args))
    _forget_fsspec_instances()
    try:
        yield s
    finally:
        FileSystems.set_options(PipelineOptions([]))
        _forget_fsspec_instances()
        try:
            server.stop()
        except Exception:  # already stopped by a test of network faults
            pass


def _reset(url: str) -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=10).close()


def _forget_fsspec_instances() -> None:
    """s3fs instances (and the trainer's per-root cache) hold a client for one endpoint: drop them."""
    try:
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
    except ImportError:
        pass
    from bertstream.trainer.data.refs import filesystem

    filesystem.cache_clear()
