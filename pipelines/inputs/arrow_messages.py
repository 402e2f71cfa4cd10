"""The messages of an Arrow IPC stream read from their metadata alone, so that a message's body is sized before
a byte of it is read (:mod:`bertstream.pipelines.inputs.columnar` reads the tables).

An IPC stream (and the part of an IPC file after its magic) is a run of *encapsulated messages*: an optional
``0xFFFFFFFF`` continuation marker, an int32 metadata length (0: the end of the stream), that many bytes of a
flatbuffer ``Message`` (Arrow's ``format/Message.fbs``), then ``bodyLength`` bytes of body. From the flatbuffer
this reads only what sizes the work: the header's kind, ``bodyLength``, a record batch's row count (``length``)
and whether its buffers are compressed (then their uncompressed sizes, which head each buffer in the body).
Every offset is checked against the bytes there are, so a corrupt message is an :class:`InputError` naming the
file and the message's byte, never a read past the file or an allocation the metadata asks for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bertstream.pipelines.common.files import InputError

SCHEMA, DICTIONARY, RECORD_BATCH = 1, 2, 3  # the MessageHeader union's kinds (Message.fbs)
_CONTINUATION = b"\xff\xff\xff\xff"
_MAX_METADATA = 64 << 20  # bytes of one message's flatbuffer: a schema of many columns is kilobytes


@dataclass(frozen=True, slots=True)
class Head:
    """One message as its metadata tells it. ``body`` is its body's first byte; ``rows`` a record or dictionary
    batch's row count; ``unpacked`` the bytes its body takes in memory once read (more than ``body_length`` when
    its buffers are compressed)."""

    offset: int
    kind: int
    body: int
    body_length: int
    rows: int
    compressed: bool
    unpacked: int

    @property
    def end(self) -> int:
        return self.body + self.body_length


def heads(source: Any, start: int, size: int, path: str) -> Iterator[Head]:
    """The messages from ``start`` (a message's first byte) to the stream's end marker (or the file's end), read
    from their metadata; ``source`` is a seekable pyarrow file of ``size`` bytes. Bodies are skipped, not read
    (only the 8-byte sizes that head a compressed body's buffers)."""
    offset = start
    while True:
        head = read_head(source, offset, size, path)
        if head is None:
            return
        yield head
        offset = head.end


def read_head(source: Any, offset: int, size: int, path: str) -> Head | None:
    """The message at byte ``offset`` from its metadata, or None at the stream's end."""
    source.seek(offset)
    prefix = source.read(8)
    if not prefix or prefix[:4] == b"\0\0\0\0" or prefix == _CONTINUATION + b"\0\0\0\0":
        return None
    width = 8 if prefix[:4] == _CONTINUATION else 4  # (streams before Arrow 0.15 have no continuation marker)
    if len(prefix) < width:
        raise _bad(path, offset, "cut short")
    length = int.from_bytes(prefix[width - 4 : width], "little", signed=True)
    if length < 0 or length > _MAX_METADATA or offset + width + length > size:
        raise _bad(path, offset, f"its metadata length {length} does not fit the file's {size} bytes")
    source.seek(offset + width)
    meta = source.read(length)
    try:
        kind, body_length, batch = _message(meta)
        rows, buffers, compressed = _batch(meta, batch) if batch is not None else (0, [], False)
    except ValueError as e:
        raise _bad(path, offset, f"its metadata is corrupt ({e})") from None
    body = offset + width + length
    if body_length < 0 or body + body_length > size or rows < 0:
        raise _bad(path, offset, f"its body of {body_length} bytes ({rows} rows) does not fit the file's {size} bytes")
    unpacked = _unpacked(source, body, body_length, buffers, path, offset) if compressed else body_length
    return Head(offset, kind, body, body_length, rows, compressed, unpacked)


# --------------------------------------------------------------------------------------------- internals


def _bad(path: str, offset: int, why: str) -> InputError:
    return InputError(
        f"cannot read {path}: not a readable Arrow IPC file or stream (the message at byte {offset}: {why})"
    )


def _int(buf: bytes, at: int, width: int, signed: bool = False) -> int:
    if at < 0 or at + width > len(buf):
        raise ValueError(f"an offset {at} outside its {len(buf)} bytes")
    return int.from_bytes(buf[at : at + width], "little", signed=signed)


def _table(buf: bytes, at: int) -> tuple[int, int, int]:
    """A flatbuffer table at ``at``: (its position, its vtable's position, the vtable's size)."""
    vtable = at - _int(buf, at, 4, signed=True)
    vsize = _int(buf, vtable, 2)
    if vsize < 4 or vsize % 2 or vtable + vsize > len(buf):
        raise ValueError(f"a vtable of {vsize} bytes at {vtable}")
    return at, vtable, vsize


def _field(buf: bytes, table: tuple[int, int, int], i: int) -> int | None:
    """Where field ``i`` of ``table`` is, None when absent (its default)."""
    at, vtable, vsize = table
    if 4 + 2 * i >= vsize:
        return None
    rel = _int(buf, vtable + 4 + 2 * i, 2)
    return at + rel if rel else None


def _ref(buf: bytes, at: int) -> int:
    """The position an offset field at ``at`` refers to."""
    return at + _int(buf, at, 4)


def _message(meta: bytes) -> tuple[int, int, tuple[int, int, int] | None]:
    """``Message``: (header kind, bodyLength, the RecordBatch table of a record or dictionary batch or None)."""
    message = _table(meta, _int(meta, 0, 4))
    at = _field(meta, message, 1)  # header_type
    kind = _int(meta, at, 1) if at is not None else 0
    at = _field(meta, message, 3)  # bodyLength
    body_length = _int(meta, at, 8, signed=True) if at is not None else 0
    at = _field(meta, message, 2)  # header
    if kind not in (DICTIONARY, RECORD_BATCH) or at is None:
        return kind, body_length, None
    header = _table(meta, _ref(meta, at))
    if kind == DICTIONARY:  # DictionaryBatch { id, data: RecordBatch, isDelta }
        at = _field(meta, header, 1)
        if at is None:
            return kind, body_length, None
        header = _table(meta, _ref(meta, at))
    return kind, body_length, header


def _batch(meta: bytes, batch: tuple[int, int, int]) -> tuple[int, list[tuple[int, int]], bool]:
    """``RecordBatch``: (length: its rows, its buffers' (offset, length) in the body, whether compressed)."""
    at = _field(meta, batch, 0)
    rows = _int(meta, at, 8, signed=True) if at is not None else 0
    compressed = _field(meta, batch, 3) is not None
    buffers: list[tuple[int, int]] = []
    at = _field(meta, batch, 2)
    if compressed and at is not None:
        vector = _ref(meta, at)
        count = _int(meta, vector, 4)
        if vector + 4 + 16 * count > len(meta):
            raise ValueError(f"{count} buffers in {len(meta)} bytes")
        for k in range(count):  # struct Buffer { offset: long; length: long }
            buffers.append((_int(meta, vector + 4 + 16 * k, 8, True), _int(meta, vector + 12 + 16 * k, 8, True)))
    return rows, buffers, compressed


def _unpacked(source: Any, body: int, body_length: int, buffers: list[tuple[int, int]], path: str, at: int) -> int:
    """The bytes a compressed body takes once read: each buffer starts with its uncompressed size (int64; -1:
    stored as it is)."""
    total = 0
    for offset, length in buffers:
        if offset < 0 or length < 0 or offset + length > body_length:
            raise _bad(path, at, f"a buffer of {length} bytes at {offset} outside its body of {body_length}")
        if length == 0:
            continue
        if length < 8:
            raise _bad(path, at, f"a compressed buffer of {length} bytes")
        source.seek(body + offset)
        n = int.from_bytes(source.read(8), "little", signed=True)
        total += length - 8 if n == -1 else max(n, 0)
    return max(total, body_length)
