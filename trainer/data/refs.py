"""Where a shard lives and how its bytes are fetched: local paths (memory-mapped) or fsspec URLs.

Remote waits are bounded: ``s3://`` filesystems get connect/read timeouts and a bounded number of
retries unless fsspec's configuration (``FSSPEC_S3='{"config_kwargs": {...}}'``) or botocore's
environment (``AWS_MAX_ATTEMPTS``, ``AWS_RETRY_MODE``) sets them. Every remote failure reaches the caller
as an ``OSError`` whose message names the object's URL (botocore's and aiohttp's own exceptions are not
``OSError``s), so that the shard checks report it as "cannot be read" with the shard's URL and checksum.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem

from bertstream.schemas.fields import local_member, relative_path
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.trainer.errors import UserError

_HASH_CHUNK = 8 << 20


class ShardError(UserError, RuntimeError):
    """A shard is missing, truncated, fails its manifest sha256, or does not decode.

    Takes one message argument so that torch's DataLoader can re-raise it from a worker unchanged.
    """

    def __init__(self, message: str, *, path: str | None = None, sha256: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.sha256 = sha256


@dataclass(frozen=True, slots=True)
class ShardRef:
    """One manifest shard entry, resolved against its dataset directory."""

    root: str  # dataset directory as configured: local path or fsspec URL
    dataset: int  # index of that directory in DataConfig.paths
    relpath: str  # manifest path, relative to root
    format: str
    count: int
    bytes: int
    sha256: str
    max_length: int | None = None  # the manifest's max_seq_length: no row is longer

    @property
    def url(self) -> str:
        return self.root.rstrip("/") + "/" + self.relpath

    def error(self, reason: str) -> ShardError:
        return ShardError(
            f"shard {self.url}: {reason} (manifest: sha256 {self.sha256}, {self.bytes} bytes)",
            path=self.url,
            sha256=self.sha256,
        )


# botocore's defaults are 60 s to connect and 60 s per read, 5 attempts ("legacy" mode), and s3fs repeats
# each call up to 5 times on top: 25 minutes on an endpoint that accepts and never answers. A shard read is
# one GET; 10 s to connect and 30 s without a byte are generous on any network. Worst case here: s3fs's 2
# tries x botocore's 3 attempts x 30 s, about 3 minutes, then an error naming the object.
S3_TIMEOUTS = {"connect_timeout": 10, "read_timeout": 30}
S3_RETRIES = {"max_attempts": 3, "mode": "standard"}
S3FS_TRIES = 2  # s3fs.S3FileSystem.retries (a class attribute, not a constructor argument)


# The package fsspec needs for each protocol the trainer documents (docs/pretraining.md, "Object stores (S3 and S3-compatible servers) end to end").
_PROTOCOL_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "http": "aiohttp", "https": "aiohttp", "gs": "gcsfs"}


def _storage_options(root: str) -> dict[str, Any]:
    protocol = root.split("://", 1)[0] if "://" in root else ""
    if protocol not in ("s3", "s3a"):
        return {}
    configured = dict(fsspec.config.conf.get("s3", {}).get("config_kwargs", {}))
    defaults: dict[str, Any] = dict(S3_TIMEOUTS)
    if not ({"AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"} & os.environ.keys()):
        defaults["retries"] = dict(S3_RETRIES)
    return {"config_kwargs": {**defaults, **configured}}


@functools.lru_cache(maxsize=64)
def filesystem(root: str) -> tuple[Any, str, bool]:
    """``(fsspec filesystem, path of root inside it, is_local)``; cached per process."""
    options = _storage_options(root)
    try:
        fs, path = fsspec.core.url_to_fs(root, **options)
    except ImportError as e:  # fsspec's own words ("Install s3fs to access S3") name no module: name it
        protocol = root.split("://", 1)[0]
        package = _PROTOCOL_PACKAGES.get(protocol, f"the fsspec implementation of {protocol}://")
        missing = ImportError(
            f"{root}: reading {protocol}:// needs {package}, which is not installed ({e})", name=package.split()[0]
        )
        raise missing from None
    if options and isinstance(getattr(fs, "retries", None), int):
        fs.retries = min(fs.retries, S3FS_TRIES)
    return fs, path, isinstance(fs, LocalFileSystem)


# A forked process (a DataLoader worker) must not use its parent's clients: an s3fs filesystem holds an asyncio
# loop and aiohttp sessions bound to the parent ("This class is not fork-safe"). fsspec forgets its own
# instances on a pid change; this cache is forgotten at the fork, so each worker makes its own client.
os.register_at_fork(after_in_child=filesystem.cache_clear)


@contextlib.contextmanager
def remote_errors(url: str) -> Iterator[None]:
    """Re-raise a remote filesystem's own exceptions (botocore, aiohttp, ...) as ``OSError``, URL named."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - whatever the client library raises for a network or server fault
        if isinstance(e, OSError) and url in str(e) or isinstance(e, WholeFileError):  # named already
            raise
        name = type(e).__name__
        err: type[OSError]
        if isinstance(e, FileNotFoundError):
            err = FileNotFoundError
        elif "timeout" in name.lower():
            err = TimeoutError
        elif "connect" in name.lower() or isinstance(e, ConnectionError):
            err = ConnectionError
        else:
            err = OSError
        raise err(f"{url}: {name}: {e}") from e


def resolve(root: str, relpath: str) -> tuple[Any, str, bool]:
    """The file ``relpath`` (a manifest's or a checkpoint's name for it) of the folder ``root``: it must stay
    inside ``root`` (:func:`~bertstream.schemas.fields.local_member`: links resolved on a local disk; remote
    paths, which have no links, lexically)."""
    fs, base, local = filesystem(root)
    if local:
        return fs, local_member(base, relpath, f"{root.rstrip('/')}/{relpath}"), local
    relative_path(relpath, f"{root.rstrip('/')}/{relpath}")
    return fs, posixpath.join(base, relpath), local


def read_text(root: str, relpath: str) -> bytes:
    """A dataset's small file (its manifest, its vocabulary) whole, through the capped reader
    (``bertstream.schemas.whole_file``): a FIFO or ``/dev/zero`` in its place is refused, not read forever."""
    fs, path, local = resolve(root, relpath)
    if local:
        return read_whole(path, "the dataset's file")
    url = root.rstrip("/") + "/" + relpath
    with remote_errors(url):
        return read_whole(url, "the dataset's file", opener=lambda: fs.open(path, "rb"))


def file_size(ref: ShardRef) -> int:
    fs, path, local = resolve(ref.root, ref.relpath)
    if local:
        return os.stat(path).st_size
    with remote_errors(ref.url):
        return int(fs.size(path))


def read_buffer(ref: ShardRef) -> pa.Buffer:
    """The whole shard: a memory map for local files (no copy), one read into memory for remote ones."""
    fs, path, local = resolve(ref.root, ref.relpath)
    if local:
        with pa.memory_map(path, "r") as mm:
            return mm.read_buffer()  # the buffer keeps the mapping alive after close
    # fs.open, not pyarrow's FSSpecHandler: that one turns every failure of its existence check (a refused
    # connection too) into FileNotFoundError
    with remote_errors(ref.url), fs.open(path, "rb") as f:
        return pa.py_buffer(f.read())


def open_input(ref: ShardRef) -> pa.NativeFile:
    """Random-access handle: reading an Arrow footer through it fetches only the footer."""
    fs, path, local = resolve(ref.root, ref.relpath)
    if local:
        return pa.memory_map(path, "r")
    with remote_errors(ref.url):
        fs.info(path)  # a missing object or a dead endpoint, each as itself (see read_buffer)
        return PyFileSystem(FSSpecHandler(fs)).open_input_file(path)


def sha256_of(ref: ShardRef) -> str:
    """Streamed hash, so that up-front verification never holds a whole shard in memory."""
    fs, path, local = resolve(ref.root, ref.relpath)
    h = hashlib.sha256()
    with contextlib.nullcontext() if local else remote_errors(ref.url):
        with open(path, "rb") if local else fs.open(path, "rb") as f:
            while chunk := f.read(_HASH_CHUNK):
                h.update(chunk)
    return h.hexdigest()
