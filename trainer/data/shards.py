"""One shard's bytes -> columnar numpy views (no per-sample objects, no pickle).

Both formats end up as :class:`Block` s: ragged columns as ``(values, starts, lengths)`` over the
shard's own buffer (zero-copy where alignment allows), plus the scalar columns. Arrow gives one block
per record batch; a WebDataset tar gives one block, found by walking the tar headers once and decoding
the fixed ``.bert`` header of every member at once (``bertstream.schemas.wds.decode_headers``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bertstream.schemas import id_types, wds
from bertstream.schemas import pretraining as pt
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import VocabMismatchError
from bertstream.trainer.data.refs import ShardError, ShardRef, read_buffer

_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)
_MEMBER_SUFFIX = b"." + wds.EXTENSION.encode()
_REGULAR = (ord("0"), 0, ord("7"))


@dataclass(slots=True)
class Ragged:
    """Row ``i`` is ``values[starts[i] : starts[i] + lengths[i]]``."""

    values: np.ndarray
    starts: np.ndarray  # [rows] int64
    lengths: np.ndarray  # [rows] int64


@dataclass(slots=True)
class Block:
    input_ids: Ragged
    masked_positions: Ragged
    masked_ids: Ragged
    segment_a: np.ndarray  # [rows] int16
    nsp: np.ndarray  # [rows] int8
    instance_id: np.ndarray  # [rows] uint64

    def __len__(self) -> int:
        return len(self.segment_a)


@dataclass(slots=True)
class ShardData:
    ref: ShardRef
    blocks: list[Block]
    block_starts: np.ndarray  # [len(blocks) + 1] first row of each block, then the row count

    @property
    def rows(self) -> int:
        return int(self.block_starts[-1])


def open_shard(ref: ShardRef, *, verify_sha256: bool, vocab_sha256: str, id_type: str) -> ShardData:
    """Read, check (size, optionally sha256, schema, row count) and index one shard."""
    try:
        buf = read_buffer(ref)
    except OSError as e:
        raise ref.error(f"cannot be read ({type(e).__name__}: {e})") from None
    if buf.size != ref.bytes:
        raise ref.error(f"is {buf.size} bytes, the manifest says {ref.bytes}: truncated or rewritten")
    if verify_sha256:
        digest = hashlib.sha256(buf).hexdigest()
        if digest != ref.sha256:
            raise ref.error(f"content hashes to {digest}, not the manifest sha256")
    try:
        if ref.format == "arrow":
            blocks = _arrow_blocks(buf, ref, vocab_sha256, id_type)
        else:
            # Header checksums only guard what a matching sha256 has already proven.
            blocks = [_tar_block(buf, ref, id_type, check_headers=not verify_sha256)]
    except (SchemaError, VocabMismatchError, ShardError):
        raise
    except (pa.ArrowException, ValueError, IndexError, OverflowError, OSError) as e:  # OSError: Arrow's footer
        raise ref.error(f"does not decode ({type(e).__name__}: {e})") from None
    blocks = [b for b in blocks if len(b)]
    for b in blocks:
        for name, r in (
            (pt.INPUT_IDS, b.input_ids),
            (pt.MASKED_LM_POSITIONS, b.masked_positions),
            (pt.MASKED_LM_IDS, b.masked_ids),
        ):
            if r.starts.min() < 0 or r.lengths.min() < 0 or (r.starts + r.lengths).max() > len(r.values):
                raise ref.error(f"{name} list offsets point outside their values")
        bad = pt.row_problem(b.input_ids.lengths, b.segment_a, b.nsp, b.masked_positions.lengths, ref.max_length)
        if bad is not None:
            raise ref.error(f"instance {int(b.instance_id[bad[0]]):016x} {bad[1]}")
    starts = np.zeros(len(blocks) + 1, np.int64)
    np.cumsum([len(b) for b in blocks], out=starts[1:])
    if starts[-1] != ref.count:
        raise ref.error(f"holds {starts[-1]} instances, the manifest says {ref.count}")
    return ShardData(ref, blocks, starts)


def check_arrow_header(f: pa.NativeFile, source: str, vocab_sha256: str, id_type: str) -> pa.Schema:
    """Schema version, kind, fields, id type and vocab hash of an Arrow shard (footer or stream header)."""
    schema = _open_arrow(f).schema
    _check_arrow_schema(schema, source, vocab_sha256, id_type)
    return schema


def _open_arrow(src: pa.Buffer | pa.NativeFile) -> pa.ipc.RecordBatchFileReader | pa.ipc.RecordBatchStreamReader:
    # Writers may use the random-access file format (magic "ARROW1") or the stream format.
    if isinstance(src, pa.Buffer):
        magic = bytes(memoryview(src)[:6])
    else:
        magic = bytes(src.read_at(6, 0)) if src.size() >= 6 else b""
    if magic == b"ARROW1":
        return pa.ipc.open_file(src)
    if isinstance(src, pa.NativeFile):
        src.seek(0)
    return pa.ipc.open_stream(src)


def _check_arrow_schema(schema: pa.Schema, source: str, vocab_sha256: str, id_type: str) -> None:
    found = pt.check_schema(schema, source=source)
    if found != id_type:
        raise SchemaError(f"{source}: ids are {found}, the manifest vocab says {id_type}")
    shard_vocab = pt.read_metadata(schema)["vocab_sha256"]
    if shard_vocab and shard_vocab != vocab_sha256:
        raise VocabMismatchError(f"{source}: schema metadata vocab sha256 {shard_vocab} != manifest {vocab_sha256}")


def _arrow_blocks(buf: pa.Buffer, ref: ShardRef, vocab_sha256: str, id_type: str) -> list[Block]:
    reader = _open_arrow(buf)
    _check_arrow_schema(reader.schema, ref.url, vocab_sha256, id_type)
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    else:
        batches = list(reader)
    batches = [rb for rb in batches if rb.num_rows]
    for rb in batches:
        # Offsets and buffer sizes as the IPC file states them are untrusted: an edited footer or offset made
        # numpy read past the buffer (a segfault). Full validation is a pass over the offsets, in C++.
        rb.validate(full=True)
        for name, col in zip(rb.schema.names, rb.columns):
            if col.null_count:
                raise ValueError(f"column {name} holds {col.null_count} nulls")
    if not batches:
        return []
    # One block per shard whatever the record batch size: per-block work in a batch gather then
    # stays constant. Uncompressed IPC values live inside ``buf``, so ragged rows can point into one
    # typed view of the whole file (no copy); anything else (e.g. compressed buffers) is copied.
    views: dict[np.dtype, np.ndarray] = {}
    col = {name: tuple(rb.column(name) for rb in batches) for name in pt.FIELDS}  # per field: every chunk
    return [
        Block(
            input_ids=_merged_ragged(buf, col[pt.INPUT_IDS], views),
            masked_positions=_merged_ragged(buf, col[pt.MASKED_LM_POSITIONS], views),
            masked_ids=_merged_ragged(buf, col[pt.MASKED_LM_IDS], views),
            segment_a=_merged(col[pt.SEGMENT_A_LENGTH]),
            nsp=_merged(col[pt.NEXT_SENTENCE_LABEL]),
            instance_id=_merged(col[pt.INSTANCE_ID]),
        )
    ]


def _merged(chunks: tuple[pa.Array, ...]) -> np.ndarray:
    return np.concatenate([c.to_numpy() for c in chunks])


def _merged_ragged(buf: pa.Buffer, chunks: tuple[pa.ListArray, ...], views: dict[np.dtype, np.ndarray]) -> Ragged:
    # The checked schema's list element type (uint16 or int32): Arrow integer names are NumPy dtype names.
    dtype = np.dtype(str(chunks[0].type.value_type))
    size = dtype.itemsize
    view = views.get(dtype)
    if view is None:
        view = views[dtype] = np.frombuffer(buf, dtype, count=buf.size // size)
    starts, lengths = [], []
    for col in chunks:
        # .offsets honours a sliced array's offset and indexes the unsliced .values: a consistent pair.
        off = col.offsets.to_numpy().astype(np.int64)
        values = col.values
        lengths.append(np.diff(off))
        if off[-1] == off[0]:  # nothing to point at (an all-empty column may have no buffer at all)
            starts.append(np.zeros(len(col), np.int64))
            continue
        at = values.buffers()[1].address + values.offset * size - buf.address
        if not (0 <= at and at + len(values) * size <= buf.size and at % size == 0):
            return _copied_ragged(chunks, dtype)
        starts.append(at // size + off[:-1])
    return Ragged(view, np.concatenate(starts), np.concatenate(lengths))


def _copied_ragged(chunks: tuple[pa.ListArray, ...], dtype: np.dtype) -> Ragged:
    values, starts, lengths, base = [], [], [], 0
    for col in chunks:
        off = col.offsets.to_numpy().astype(np.int64)
        values.append(col.values.to_numpy()[off[0] : off[-1]].astype(dtype, copy=False))
        starts.append(base + off[:-1] - off[0])
        lengths.append(np.diff(off))
        base += int(off[-1] - off[0])
    return Ragged(np.concatenate(values), np.concatenate(starts), np.concatenate(lengths))


def _walk_tar(mv: memoryview) -> tuple[list[int], list[int]]:
    """Header offsets and sizes of every ``.bert`` member (its payload starts 512 bytes later).

    The one sequential step of reading a tar (each header's place depends on the previous size),
    so it touches only the bytes it needs; checksums are verified vectorised afterwards.
    """
    headers: list[int] = []
    sizes: list[int] = []
    end = len(mv)
    o = 0
    long_name: bytes | None = None
    pax_size: int | None = None
    while True:
        if o + _BLOCK > end:
            raise ValueError(f"archive ends inside a header at byte {o} (no end-of-archive marker)")
        if mv[o] == 0 and mv[o : o + _BLOCK] == _ZERO_BLOCK:
            break
        field = mv[o + 124 : o + 136].tobytes()
        if field[0] & 0x80:  # base-256 size (GNU extension for huge members)
            size = int.from_bytes(field[1:], "big")
        else:
            size = int(field.split(b"\0", 1)[0] or b"0", 8)
        typ = mv[o + 156]
        if pax_size is not None and typ in _REGULAR:
            size, pax_size = pax_size, None
        if size < 0:  # an octal "-1" or a pax size of -1000 would step back: every header advances or fails
            raise ValueError(f"member at byte {o} has a negative size ({size})")
        data = o + _BLOCK
        if data + size > end:
            raise ValueError(f"member at byte {o} ({size} bytes) runs past the end of the archive ({end} bytes)")
        if typ in _REGULAR:
            if long_name is not None:
                name, long_name = long_name, None
            else:
                name = mv[o : o + 100].tobytes()
                nul = name.find(b"\0")
                if nul >= 0:
                    name = name[:nul]
            if name.endswith(_MEMBER_SUFFIX):
                headers.append(o)
                sizes.append(size)
        elif typ == ord("L"):  # GNU long name for the next member
            long_name = mv[data : data + size].tobytes().split(b"\0", 1)[0]
        elif typ == ord("x"):  # pax extended header for the next member
            long_name, pax_size = _pax(mv[data : data + size].tobytes(), long_name, pax_size)
        o = data + ((size + _BLOCK - 1) & ~(_BLOCK - 1))
    return headers, sizes


def _pax(records: bytes, name: bytes | None, size: int | None) -> tuple[bytes | None, int | None]:
    pos = 0
    while pos < len(records):
        space = records.index(b" ", pos)
        length = int(records[pos:space])
        if length <= space - pos or pos + length > len(records):  # a record of length 0 would never advance
            raise ValueError(f"pax record at byte {pos} has length {length}, outside its header")
        key, _, value = records[space + 1 : pos + length - 1].partition(b"=")
        if key == b"path":
            name = value
        elif key == b"size":
            size = int(value)
        pos += length
    return name, size


def _verify_checksums(u8: np.ndarray, headers: np.ndarray) -> None:
    for lo in range(0, len(headers), 4096):
        h = headers[lo : lo + 4096]
        blocks = u8[h[:, None] + np.arange(_BLOCK)]  # [k, 512]
        field = blocks[:, 148:156]  # octal digits, then NUL and/or space
        stored = np.zeros(len(h), np.int64)
        for c in range(8):
            digit = (field[:, c] >= 48) & (field[:, c] <= 55)
            stored = np.where(digit, stored * 8 + field[:, c].astype(np.int64) - 48, stored)
        # The checksum is computed with its own 8 bytes taken as spaces.
        total = blocks.sum(axis=1, dtype=np.int64) - field.sum(axis=1, dtype=np.int64) + 8 * 32
        bad = np.flatnonzero(total != stored)
        if bad.size:
            raise ValueError(f"tar header checksum mismatch at byte {int(h[bad[0]])}")


def _tar_block(buf: pa.Buffer, ref: ShardRef, id_type: str, *, check_headers: bool) -> Block:
    mv = memoryview(buf)
    headers, sizes = _walk_tar(mv)
    u8 = np.frombuffer(buf, np.uint8)
    h = np.asarray(headers, np.int64)
    if check_headers:
        _verify_checksums(u8, h)
    if h.size == 0:
        return _empty_block(id_type)
    head = wds.decode_headers(u8, h + _BLOCK, np.asarray(sizes, np.int64), id_type, source=ref.url, member_at=h)
    dtype = id_types.numpy_dtype(id_type)
    views: dict[np.dtype, np.ndarray] = {}
    return Block(
        input_ids=_tar_ragged(buf, u8, head.input_ids_at, head.n, dtype, views),
        masked_positions=_tar_ragged(buf, u8, head.positions_at, head.m, wds.POSITION, views),
        masked_ids=_tar_ragged(buf, u8, head.masked_ids_at, head.m, dtype, views),
        segment_a=head.segment_a_length,
        nsp=head.next_sentence_label,
        instance_id=head.instance_id,
    )


def _tar_ragged(
    buf: pa.Buffer,
    u8: np.ndarray,
    at: np.ndarray,
    count: np.ndarray,
    dtype: np.dtype,
    views: dict[np.dtype, np.ndarray],
) -> Ragged:
    """Rows at byte offsets ``at``: views into the shard where aligned (uint16 ids and positions: payloads are
    512-aligned and every field starts at an even offset), else copied out once per shard (int32 ids)."""
    size = dtype.itemsize
    if np.all(at % size == 0):
        view = views.get(dtype)
        if view is None:
            view = views[dtype] = np.frombuffer(buf, dtype, count=buf.size // size)
        return Ragged(view, at // size, count)
    return _copy_ragged(u8, at, count, dtype)


def _copy_ragged(u8: np.ndarray, at: np.ndarray, count: np.ndarray, dtype: np.dtype) -> Ragged:
    width = dtype.itemsize
    nbytes = count * width
    ends = np.cumsum(nbytes)
    src = np.repeat(at - (ends - nbytes), nbytes) + np.arange(int(ends[-1]) if len(ends) else 0)
    values = u8[src].view(dtype)
    starts = (ends - nbytes) // width
    return Ragged(values, starts, count)


def _empty_block(id_type: str) -> Block:
    z = np.zeros(0, np.int64)
    ragged_ids = Ragged(np.zeros(0, id_types.numpy_dtype(id_type)), z, z)
    return Block(
        ragged_ids,
        Ragged(np.zeros(0, wds.POSITION), z, z),
        ragged_ids,
        np.zeros(0, np.int16),
        np.zeros(0, np.int8),
        np.zeros(0, np.uint64),
    )
