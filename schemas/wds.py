"""WebDataset sample layout for pretraining instances, version 1.

A shard is a plain POSIX tar (readable by the stock ``webdataset`` library, no pickle anywhere).
Each sample is ONE tar member named ``<key>.bert`` where ``key`` is the instance id as 16 lowercase
hex digits. One member per sample keeps shards small (a tar member costs a 512-byte header plus
padding to 512 bytes) and lets a loader decode a sample with one ``frombuffer`` per field.

Member payload, little-endian::

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

Use :func:`decode_sample` on a sample dict from ``webdataset.WebDataset(urls, shardshuffle=False)``
(no ``.decode()`` needed: ``.bert`` is not an extension webdataset decodes itself).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from schemas.version import SchemaError

EXTENSION = "bert"
LAYOUT_VERSION = 1
_HEADER = struct.Struct("<BBHHhbxQ")
HEADER_SIZE = _HEADER.size  # 18
_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<i4")}


def sample_key(instance_id: int) -> str:
    return f"{instance_id:016x}"


def encode_instance(
    input_ids: np.ndarray,
    segment_a_length: int,
    masked_lm_positions: np.ndarray,
    masked_lm_ids: np.ndarray,
    next_sentence_label: int,
    instance_id: int,
    id_width: int,
) -> bytes:
    dt = _DTYPES[id_width]
    return b"".join(
        (
            _HEADER.pack(
                LAYOUT_VERSION,
                id_width,
                len(input_ids),
                len(masked_lm_positions),
                segment_a_length,
                next_sentence_label,
                instance_id,
            ),
            np.asarray(input_ids, dtype=dt).tobytes(),
            np.asarray(masked_lm_positions, dtype="<u2").tobytes(),
            np.asarray(masked_lm_ids, dtype=dt).tobytes(),
        )
    )


def decode_payload(payload: bytes, *, source: str = "sample") -> dict[str, Any]:
    if len(payload) < HEADER_SIZE:
        raise SchemaError(f"{source}: {len(payload)} bytes, shorter than the {HEADER_SIZE}-byte header")
    version, width, n, m, seg_a, nsp, iid = _HEADER.unpack_from(payload)
    if version != LAYOUT_VERSION:
        raise SchemaError(f"{source}: layout version {version}, this build reads {LAYOUT_VERSION}")
    dt = _DTYPES.get(width)
    if dt is None:
        raise SchemaError(f"{source}: id width {width} is neither 2 nor 4")
    expected = HEADER_SIZE + n * width + m * 2 + m * width
    if len(payload) != expected:
        raise SchemaError(f"{source}: {len(payload)} bytes, header says {expected}")
    o = HEADER_SIZE
    input_ids = np.frombuffer(payload, dt, n, o)
    o += n * width
    positions = np.frombuffer(payload, "<u2", m, o)
    o += m * 2
    masked_ids = np.frombuffer(payload, dt, m, o)
    return {
        "input_ids": input_ids,
        "segment_a_length": seg_a,
        "masked_lm_positions": positions,
        "masked_lm_ids": masked_ids,
        "next_sentence_label": nsp,
        "instance_id": iid,
    }


def decode_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """Decode a raw webdataset sample dict (``__key__``, ``bert``) into numpy fields."""
    key = sample.get("__key__", "?")
    payload = sample.get(EXTENSION)
    if payload is None:
        raise SchemaError(
            f"sample {key}: no .{EXTENSION} member (members: {sorted(k for k in sample if not k.startswith('__'))})"
        )
    return decode_payload(payload, source=f"sample {key}")
