"""Requests that cannot be answered end with a deadline: a connect probe of every server a run needs, first.

Beam's clients wait long and silently on a server nobody answers for: its S3 and GCS clients retry each call with
exponential backoff (an ``s3://`` input with no network printed nothing for 100 s and more), and
``--runner PortableRunner --job_endpoint`` to a closed port waits on gRPC with no deadline at all. Before any
of that, :func:`probe_stores` and :func:`probe_job_endpoint` open one TCP connection to each server, the name
lookup included, within :data:`PROBE_SECONDS`, and refuse in one line naming the flag, the URL and the server
(``--dask_client_address`` is probed the same way, with its own handshake: ``dask_runner.probe_scheduler``).
The connection itself, with its deadline, is ``bertstream.cli.reach`` (the trainer's MLflow probe makes it too).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from bertstream.cli.errors import UsageError
from bertstream.cli.reach import PROBE_SECONDS, Unreachable, connect

_URL = re.compile(r"\b([a-z][a-z0-9+.-]*)://\S*")


def probe(param: str, what: str, host: str, port: int, server: str, seconds: float = PROBE_SECONDS) -> None:
    """Connect to ``host:port`` and close, or raise ``UsageError(param)``: ``WHAT: SERVER WHY``."""
    try:
        connect(host, port, seconds).close()
    except Unreachable as e:
        raise UsageError(param, f"{what}: {server} {e.why}") from None


# The package Beam's filesystem of each probed scheme talks through (apache-beam[aws], apache-beam[gcp]).
_CLIENT = {"s3": "boto3", "gs": "google.cloud.storage"}


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def store_endpoint(url: str, options: object | None = None) -> str | None:
    """The server Beam's client for ``url``'s object store talks to (``http(s)://HOST[:PORT]``), or None for a
    scheme that is not probed (local paths, HDFS, Azure). S3: ``--s3_endpoint_url``, else botocore's
    ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, else AWS's regional endpoint; GCS: storage.googleapis.com."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in _CLIENT and not _importable(_CLIENT[scheme]):
        return None  # no client to talk to it: the missing package is what to say (the filesystem's line)
    if scheme == "s3":
        from apache_beam.options.pipeline_options import PipelineOptions, S3Options

        s3 = (options if isinstance(options, PipelineOptions) else PipelineOptions([])).view_as(S3Options)
        given = s3.s3_endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if given:
            return given.rstrip("/")
        region = s3.s3_region_name or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return f"https://s3.{region}.amazonaws.com" if region else "https://s3.amazonaws.com"
    if scheme == "gs":
        return os.environ.get("STORAGE_EMULATOR_HOST", "https://storage.googleapis.com").rstrip("/")
    return None


def probe_stores(paths: Mapping[str, Iterable[str]], options: object | None = None) -> None:
    """Probe the server of every object-store URL in ``paths`` (flag -> paths; an input may be
    ``FORMAT:URL``), each server once, naming the first flag and URL that needs it."""
    seen: set[str] = set()
    for param, values in paths.items():
        for value in values:
            m = _URL.search(value or "")
            server = store_endpoint(m.group(0), options) if m else None
            if m is None or server is None or server in seen:
                continue
            seen.add(server)
            parts = urlsplit(server if "://" in server else f"http://{server}")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            probe(param, m.group(0), parts.hostname or "", port, f"the server {server}")


def probe_job_endpoint(options: object) -> None:
    """``--job_endpoint HOST:PORT`` of a portable runner: a closed port waited on gRPC with no deadline."""
    from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

    if not isinstance(options, PipelineOptions):
        return
    endpoint = options.view_as(PortableOptions).job_endpoint
    if not endpoint or endpoint == "embed":
        return
    host, _, port = endpoint.rpartition(":")
    flag = f"--job_endpoint={endpoint}"
    if not host or not port.isdigit():
        raise UsageError("job_endpoint", f"{flag}: expected HOST:PORT (or embed)")
    probe("job_endpoint", flag, host.strip("[]"), int(port), "the job service")
