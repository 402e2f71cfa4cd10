"""Where a shard lives and how its bytes are fetched: local paths (memory-mapped) or fsspec URLs."""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem

_HASH_CHUNK = 8 << 20


class ShardError(RuntimeError):
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

    root: str      # dataset directory as configured: local path or fsspec URL
    dataset: int   # index of that directory in DataConfig.paths
    relpath: str   # manifest path, relative to root
    format: str
    count: int
    bytes: int
    sha256: str

    @property
    def url(self) -> str:
        return self.root.rstrip("/") + "/" + self.relpath

    def error(self, reason: str) -> ShardError:
        return ShardError(
            f"shard {self.url}: {reason} (manifest: sha256 {self.sha256}, {self.bytes} bytes)",
            path=self.url, sha256=self.sha256,
        )


@functools.lru_cache(maxsize=64)
def filesystem(root: str) -> tuple[Any, str, bool]:
    """``(fsspec filesystem, path of root inside it, is_local)``; cached per process."""
    fs, path = fsspec.core.url_to_fs(root)
    return fs, path, isinstance(fs, LocalFileSystem)


def resolve(root: str, relpath: str) -> tuple[Any, str, bool]:
    fs, base, local = filesystem(root)
    join = os.path.join if local else posixpath.join
    return fs, join(base, relpath), local


def read_text(root: str, relpath: str) -> bytes:
    fs, path, _ = resolve(root, relpath)
    return fs.cat_file(path)


def file_size(ref: ShardRef) -> int:
    fs, path, local = resolve(ref.root, ref.relpath)
    return os.stat(path).st_size if local else int(fs.size(path))


def read_buffer(ref: ShardRef) -> pa.Buffer:
    """The whole shard: a memory map for local files (no copy), one read into memory for remote ones."""
    fs, path, local = resolve(ref.root, ref.relpath)
    if local:
        with pa.memory_map(path, "r") as mm:
            return mm.read_buffer()  # the buffer keeps the mapping alive after close
    with PyFileSystem(FSSpecHandler(fs)).open_input_file(path) as f:
        return f.read_buffer()


def open_input(ref: ShardRef) -> pa.NativeFile:
    """Random-access handle: reading an Arrow footer through it fetches only the footer."""
    fs, path, local = resolve(ref.root, ref.relpath)
    return pa.memory_map(path, "r") if local else PyFileSystem(FSSpecHandler(fs)).open_input_file(path)


def sha256_of(ref: ShardRef) -> str:
    """Streamed hash, so that up-front verification never holds a whole shard in memory."""
    fs, path, local = resolve(ref.root, ref.relpath)
    h = hashlib.sha256()
    with (open(path, "rb") if local else fs.open(path, "rb")) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()
