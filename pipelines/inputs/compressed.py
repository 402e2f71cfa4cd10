"""A dump's bytes, decompressed in pieces whatever its compression ratio: plain XML as it is, bzip2 (one stream or
many: Wikimedia's multistream files), gzip (one member or many) and xz, told by their first bytes; zstd refused,
named. And where a multistream bzip2 file's streams start (``scan_stream_starts``), so that a dump can be read in
ranges of whole streams. What the dump reader (``mediawiki_xml``) reads through; it knows nothing of XML."""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from bertstream.pipelines.common.files import InputError

READ_BYTES = 256 << 10  # also the most XML fed to the parser at once: its tree holds this much at most
OUT_BYTES = READ_BYTES
# A stream starts with "BZh" + block size digit, then the first block's magic 0x314159265359 ("1AY&SY"): both
# byte-aligned only at a stream's start. A candidate is verified by decompressing this much from it.
_BLOCK_MAGIC = b"1AY&SY"
_VERIFY_BYTES = 4096
# Compressions told by their first bytes: bzip2 (and gzip, xz) are read; zstd is refused, named.
_GZIP, _XZ, _ZSTD = b"\x1f\x8b", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"


def chunks(f: BinaryIO, start: int, end: int | None) -> Iterator[bytes]:
    if start or f.seekable():
        f.seek(start)
    left = None if end is None else end - start
    while left is None or left > 0:
        chunk = f.read(READ_BYTES if left is None else min(READ_BYTES, left))
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield chunk


def decompressed(chunks: Iterable[bytes], label: str) -> Iterator[bytes]:
    """The bytes of plain XML as they are; of bzip2, gzip or xz (told by their first bytes), decompressed stream
    after stream (member after member). A stream cut short or corrupt data raises ``InputError``; so does zstd,
    which this reader does not read."""
    it = iter(chunks)
    first = next(it, b"")
    new: Callable[[], Any]  # a decompressor: decompress(data, max_length), needs_input, eof, unused_data
    if first.startswith(b"BZh"):
        what, new = "bzip2", bz2.BZ2Decompressor
    elif first.startswith(_GZIP):
        what, new = "gzip", _Gunzip
    elif first.startswith(_XZ):
        what, new = "xz", lzma.LZMADecompressor
    elif first.startswith(_ZSTD):
        raise InputError(f"cannot read {label}: a dump compressed with zstd is not read here: decompress it first")
    else:
        if first:
            yield first
        yield from it
        return
    dec = new()
    in_stream = False
    try:
        for data in prepend(first, it):
            # Output comes in pieces of at most OUT_BYTES, whatever the compression ratio (memory stays flat).
            while data or (in_stream and not dec.needs_input):
                in_stream = True
                out = dec.decompress(data, OUT_BYTES)
                data = b""
                if out:
                    yield out
                if dec.eof:  # what follows is the next stream
                    data, dec, in_stream = dec.unused_data, new(), False
    except (OSError, lzma.LZMAError, zlib.error) as e:
        raise InputError(f"cannot read {label}: corrupt {what} data ({e})") from e
    if in_stream:
        raise InputError(f"cannot read {label}: the {what} data ends inside a stream (truncated file)")


class _Gunzip:
    """One gzip member, with the decompressors' interface of bz2 and lzma (``needs_input``): zlib keeps the input
    it has not used yet apart (``unconsumed_tail``), fed again here."""

    def __init__(self) -> None:
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._tail = b""
        self._full = False  # the last call filled max_length: zlib may hold more output

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._z.decompress(self._tail + data if self._tail else data, max_length)
        self._tail = self._z.unconsumed_tail
        self._full = len(out) == max_length
        return out

    @property
    def needs_input(self) -> bool:
        return not self._tail and not self._full

    @property
    def eof(self) -> bool:
        return self._z.eof

    @property
    def unused_data(self) -> bytes:
        return self._z.unused_data


def prepend(first: bytes, rest: Iterable[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def scan_stream_starts(f: BinaryIO) -> list[int]:
    """Offsets of "BZh[1-9]" + block magic, each verified by decompressing ``_VERIFY_BYTES`` from it."""
    offsets: list[int] = []
    buf = b""
    base = 0  # file offset of buf[0]
    while True:
        data = f.read(8 * READ_BYTES)
        buf += data
        # Candidates past ``limit`` wait for the next read, so each has its verification bytes in ``buf``.
        limit = len(buf) if not data else len(buf) - _VERIFY_BYTES
        i = buf.find(_BLOCK_MAGIC, 4)
        while i >= 0 and i - 4 < limit:
            s = i - 4
            if buf[s : s + 3] == b"BZh" and 0x31 <= buf[s + 3] <= 0x39 and _is_stream(buf[s : s + _VERIFY_BYTES]):
                offsets.append(base + s)
            i = buf.find(_BLOCK_MAGIC, i + 1)
        if not data:
            return offsets
        if limit > 0:
            buf, base = buf[limit:], base + limit


def _is_stream(data: bytes) -> bool:
    """Whether ``data`` starts a bzip2 stream: what it decompresses to is bounded (``OUT_BYTES``), as every read
    here is. Unbounded, the check of a 600-byte stream of 400 MB of whitespace (a decompression bomb) held all of
    it at once: a 1.02 GB peak before the dump's reader refused it in one line."""
    try:
        bz2.BZ2Decompressor().decompress(data, OUT_BYTES)
    except OSError:
        return False
    return True
