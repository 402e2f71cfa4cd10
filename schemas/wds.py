"""WebDataset sample layout for pretraining instances, version 1.

A shard is a plain POSIX tar (readable by the stock ``webdataset`` library, no pickle anywhere).
Each sample is ONE tar member named ``<key>.bert`` where ``key`` is the instance id as 16 lowercase
hex digits. One member per sample keeps shards small (a tar member costs a 512-byte header plus
padding to 512 bytes) and lets a loader decode a sample with one ``frombuffer`` per field.

Member payload, little-endian (:data:`HEADER`, a NumPy structured dtype, is this table; the encoder and both
decoders below read it, nothing else spells the offsets)::

    offset size  field
    0      1     layout version (1)
    1      1     id width in bytes: 2 (uint16) or 4 (int32)
    2      2     n = len(input_ids)                      uint16
    4      2     m = len(masked_lm_positions)            uint16
    6      2     segment_a_length                        int16
    8      1     next_sentence_label                     int8
    9      1     reserved (0)
    10     8     instance_id                             uint64
    18     n*w   input_ids
    ..     m*2   masked_lm_positions                     uint16
    ..     m*w   masked_lm_ids

:func:`encode_batch` writes a batch's payloads, :func:`decode_headers` decodes every header of a shard at
once (vectorised), :func:`decode_payload` one payload (its arrays view the payload: read-only for ``bytes``).
Use :func:`decode_sample` on a sample dict from ``webdataset.WebDataset(urls, shardshuffle=False)``, or on its
``.bert`` bytes (no ``.decode()`` needed: ``.bert`` is not an extension webdataset decodes itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bertstream.schemas import id_types
from bertstream.schemas import pretraining as P
from bertstream.schemas.version import SchemaError, check_version

EXTENSION = "bert"
LAYOUT_VERSION = 1
HEADER = np.dtype(
    [
        ("version", "u1"),
        ("id_width", "u1"),
        ("n", "<u2"),  # len(input_ids)
        ("m", "<u2"),  # len(masked_lm_positions) == len(masked_lm_ids)
        ("segment_a_length", "<i2"),
        ("next_sentence_label", "i1"),
        ("reserved", "u1"),
        ("instance_id", "<u8"),
    ]
)  # packed (no alignment padding)
HEADER_SIZE = HEADER.itemsize  # 18
POSITION = P.POSITION_DTYPE  # masked_lm_positions
_MAX_LEN = np.iinfo(HEADER["n"]).max


def sample_key(instance_id: int) -> str:
    return f"{instance_id:016x}"


def member_name(instance_id: int) -> str:
    return f"{sample_key(instance_id)}.{EXTENSION}"


def payload_size(n: np.ndarray | int, m: np.ndarray | int, width: int) -> np.ndarray | int:
    """Bytes of payloads holding ``n`` input ids and ``m`` masked positions (element-wise)."""
    return HEADER_SIZE + n * width + m * (POSITION.itemsize + width)


def encode_batch(
    input_ids: npt.ArrayLike,
    offsets: npt.ArrayLike,
    segment_a_length: npt.ArrayLike,
    masked_lm_positions: npt.ArrayLike,
    masked_lm_ids: npt.ArrayLike,
    pred_offsets: npt.ArrayLike,
    next_sentence_label: npt.ArrayLike,
    instance_id: npt.ArrayLike,
    id_type: str,
) -> list[bytes]:
    """Payloads of ``B`` instances given as ragged columns: instance ``i`` has ids
    ``input_ids[offsets[i]:offsets[i + 1]]`` and predictions ``[pred_offsets[i]:pred_offsets[i + 1]]``."""
    t = id_types.id_type(id_type)
    offsets = np.asarray(offsets, np.int64)  # [B + 1]
    pred_offsets = np.asarray(pred_offsets, np.int64)  # [B + 1]
    n, m = np.diff(offsets), np.diff(pred_offsets)
    if len(n) and max(n.max(), m.max()) > _MAX_LEN:
        raise SchemaError(f"an instance holds more than {_MAX_LEN} tokens; the .{EXTENSION} layout cannot store it")
    head = np.zeros(len(n), HEADER)  # [B]
    head["version"] = LAYOUT_VERSION
    head["id_width"] = t.width
    head["n"], head["m"] = n, m
    head["segment_a_length"] = segment_a_length
    head["next_sentence_label"] = next_sentence_label
    head["instance_id"] = instance_id
    hb = head.tobytes()
    ib = np.asarray(input_ids).astype(t.numpy, copy=False).tobytes()
    pb = np.asarray(masked_lm_positions).astype(POSITION, copy=False).tobytes()
    lb = np.asarray(masked_lm_ids).astype(t.numpy, copy=False).tobytes()
    w, pw = t.width, POSITION.itemsize
    return [
        b"".join(
            (
                hb[i * HEADER_SIZE : (i + 1) * HEADER_SIZE],
                ib[offsets[i] * w : offsets[i + 1] * w],
                pb[pred_offsets[i] * pw : pred_offsets[i + 1] * pw],
                lb[pred_offsets[i] * w : pred_offsets[i + 1] * w],
            )
        )
        for i in range(len(n))
    ]


def encode_instance(
    input_ids: np.ndarray,
    segment_a_length: int,
    masked_lm_positions: np.ndarray,
    masked_lm_ids: np.ndarray,
    next_sentence_label: int,
    instance_id: int,
    id_width: int,
) -> bytes:
    t = id_types.by_width(id_width)
    return encode_batch(
        np.asarray(input_ids),
        [0, len(input_ids)],
        [segment_a_length],
        np.asarray(masked_lm_positions),
        np.asarray(masked_lm_ids),
        [0, len(masked_lm_positions)],
        [next_sentence_label],
        np.asarray([instance_id], np.uint64),
        t.name,
    )[0]


@dataclass(frozen=True, slots=True)
class Headers:
    """Every payload header of a shard, decoded, and the byte offsets of the ragged fields after them."""

    input_ids_at: np.ndarray  # [k] int64 byte offset of input_ids
    n: np.ndarray  # [k] int64 len(input_ids)
    positions_at: np.ndarray  # [k] int64 byte offset of masked_lm_positions
    masked_ids_at: np.ndarray  # [k] int64 byte offset of masked_lm_ids
    m: np.ndarray  # [k] int64 number of masked positions
    segment_a_length: np.ndarray  # [k] int16
    next_sentence_label: np.ndarray  # [k] int8
    instance_id: np.ndarray  # [k] uint64


def decode_headers(
    u8: np.ndarray,
    at: np.ndarray,
    sizes: np.ndarray,
    id_type: str,
    *,
    source: str,
    member_at: Sequence[int] | np.ndarray | None = None,
) -> Headers:
    """Vectorised decode of the payloads ``u8[at[i] : at[i] + sizes[i]]`` (``k`` of them, ``k`` >= 1).

    Raises SchemaError when the whole shard has another layout version or id width than this build and
    ``id_type`` read (named by ``source``), ValueError naming the member (``member_at[i]``, default ``at[i]``)
    when single payloads disagree or are truncated.
    """
    at = np.asarray(at, np.int64)  # [k]
    sizes = np.asarray(sizes, np.int64)  # [k]
    where = np.asarray(at if member_at is None else member_at, np.int64)
    t = id_types.id_type(id_type)
    short = np.flatnonzero(sizes < HEADER_SIZE)
    if short.size:
        raise ValueError(
            f"member at byte {int(where[short[0]])}: {int(sizes[short[0]])} bytes, "
            f"shorter than the {HEADER_SIZE}-byte header"
        )
    head = np.ascontiguousarray(u8[at[:, None] + np.arange(HEADER_SIZE)]).view(HEADER).reshape(-1)  # [k]
    version = head["version"]
    if np.any(version != LAYOUT_VERSION):
        if np.all(version == version[0]):
            check_version(int(version[0]), source=source, what="sample layout version", readable=(LAYOUT_VERSION,))
        raise ValueError(f"member at byte {int(where[np.argmax(version != LAYOUT_VERSION)])}: bad layout version")
    widths = head["id_width"]
    if np.any(widths != t.width):
        if np.all(widths == widths[0]):  # the whole shard disagrees: written for another vocab
            raise SchemaError(f"{source}: id width {int(widths[0])}, the manifest vocab says {t.width}")
        i = int(np.argmax(widths != t.width))
        raise ValueError(f"member at byte {int(where[i])}: id width {int(widths[i])}, expected {t.width}")
    n = head["n"].astype(np.int64)
    m = head["m"].astype(np.int64)
    expected = np.asarray(payload_size(n, m, t.width))
    bad = np.flatnonzero(sizes != expected)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"member at byte {int(where[i])}: {int(sizes[i])} bytes, its header says {int(expected[i])}")
    ids_at = at + HEADER_SIZE
    positions_at = ids_at + n * t.width
    return Headers(
        input_ids_at=ids_at,
        n=n,
        positions_at=positions_at,
        masked_ids_at=positions_at + m * POSITION.itemsize,
        m=m,
        segment_a_length=head["segment_a_length"].copy(),
        next_sentence_label=head["next_sentence_label"].copy(),
        instance_id=head["instance_id"].copy(),
    )


def decode_payload(payload: bytes | bytearray | memoryview, *, source: str = "sample") -> dict[str, Any]:
    if len(payload) < HEADER_SIZE:
        raise SchemaError(f"{source}: {len(payload)} bytes, shorter than the {HEADER_SIZE}-byte header")
    head = np.frombuffer(payload, HEADER, 1)[0]
    check_version(int(head["version"]), source=source, what="layout version", readable=(LAYOUT_VERSION,))
    width = int(head["id_width"])
    try:
        t = id_types.by_width(width)
    except SchemaError as e:
        raise SchemaError(f"{source}: {e}") from None
    n, m = int(head["n"]), int(head["m"])
    expected = payload_size(n, m, width)
    if len(payload) != expected:
        raise SchemaError(f"{source}: {len(payload)} bytes, header says {expected}")
    o = HEADER_SIZE
    input_ids = np.frombuffer(payload, t.numpy, n, o)
    o += n * width
    positions = np.frombuffer(payload, POSITION, m, o)
    o += m * POSITION.itemsize
    masked_ids = np.frombuffer(payload, t.numpy, m, o)
    return {
        "input_ids": input_ids,
        "segment_a_length": int(head["segment_a_length"]),
        "masked_lm_positions": positions,
        "masked_lm_ids": masked_ids,
        "next_sentence_label": int(head["next_sentence_label"]),
        "instance_id": int(head["instance_id"]),
    }


def decode_sample(sample: dict[str, Any] | bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode one sample into numpy fields: a raw webdataset sample dict (``__key__``, ``bert``), or its
    ``.bert`` bytes themselves (``decode_sample(sample["bert"])`` reads as it should too).

    The arrays are int64 and writable, one copy of a few hundred bytes: ``nn.Embedding`` and indexing take int64
    (the shard's own uint16 ids fail there: "Expected ... Long, Int; but got CPUUInt16Type"), and torch's
    ``default_collate`` and ``torch.from_numpy`` take them without the "NumPy array is not writable" warning that
    views of immutable ``bytes`` raise. :func:`decode_payload` keeps the stored widths, as views."""
    if isinstance(sample, (bytes, bytearray, memoryview)):
        return _for_torch(decode_payload(sample, source="sample"))
    key = sample.get("__key__", "?")
    payload = sample.get(EXTENSION)
    if payload is None:
        raise SchemaError(
            f"sample {key}: no .{EXTENSION} member (members: {sorted(k for k in sample if not k.startswith('__'))})"
        )
    return _for_torch(decode_payload(payload, source=f"sample {key}"))


def _for_torch(decoded: dict[str, Any]) -> dict[str, Any]:
    for k in ("input_ids", "masked_lm_positions", "masked_lm_ids"):
        decoded[k] = decoded[k].astype(np.int64)  # a copy: writable, whatever the payload was
    return decoded
