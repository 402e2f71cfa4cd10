"""Dedup's bytes on the wire: the binary parts each batch sends to the duplicate-finding shuffle (band keys,
ids, small shingle sets and sketches, packed without pickling) and the JSON a batch waits as in a spill file.
Kept apart from the dedup logic (:mod:`bertstream.pipelines.pretraining.dedup`) so that each format is read in one place.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from bertstream.pipelines.inputs.documents import Document, DocumentBatch

# --- entries: what one batch sends to the shuffle -------------------------------------------------------


# --- entries: what one batch sends to the shuffle -------------------------------------------------------
# A part: header (entries M, documents D, id bytes L, P, small shingles S), band int32 [M], key uint64 [M],
# doc uint32 [M] (position in the part's id table), id lengths uint32 [D], ids (UTF-8) [L], padding to 8,
# small-set sizes uint8 [D] (0: not small), padding to 8, small sets' shingles uint64 [S], sketches uint8 [D, P].
_PART = struct.Struct("<IIIII")


class Part(NamedTuple):
    bands: np.ndarray  # int32 [M]
    keys: np.ndarray  # uint64 [M]
    docs: np.ndarray  # uint32 [M], into ids
    ids: list[str]  # [D]
    sketches: np.ndarray  # uint8 [D, P]
    small: list[np.ndarray | None]  # [D]: the distinct shingles of a small document, else None


def _pad8(n: int) -> bytes:
    return b"\0" * (-n % 8)


def encode_part(part: Part) -> bytes:
    raw = [i.encode("utf-8") for i in part.ids]
    joined = b"".join(raw)
    sizes = np.asarray([0 if x is None else len(x) for x in part.small], dtype=np.uint8)
    values = [x for x in part.small if x is not None]
    shingled = np.concatenate(values).astype("<u8") if values else np.zeros(0, "<u8")
    sk = np.ascontiguousarray(part.sketches, dtype=np.uint8)
    return b"".join(
        (
            _PART.pack(len(part.keys), len(raw), len(joined), sk.shape[1], len(shingled)),
            part.bands.astype("<i4").tobytes(),
            part.keys.astype("<u8").tobytes(),
            part.docs.astype("<u4").tobytes(),
            np.asarray([len(r) for r in raw], dtype="<u4").tobytes(),
            joined,
            _pad8(len(joined)),
            sizes.tobytes(),
            _pad8(len(sizes)),
            shingled.tobytes(),
            sk.tobytes(),
        )
    )


def decode_parts(data: bytes) -> Iterator[Part]:
    """The parts of a byte string of parts back to back."""
    at = 0
    while at < len(data):
        m, d, nbytes, p, ns = _PART.unpack_from(data, at)
        at += _PART.size
        bands = np.frombuffer(data, "<i4", m, at)
        at += 4 * m
        keys = np.frombuffer(data, "<u8", m, at)
        at += 8 * m
        docs = np.frombuffer(data, "<u4", m, at)
        at += 4 * m
        lengths = np.frombuffer(data, "<u4", d, at)
        at += 4 * d
        joined = data[at : at + nbytes]
        at += nbytes + (-nbytes % 8)
        ends = np.cumsum(lengths)
        ids = [joined[e - n : e].decode("utf-8") for e, n in zip(ends.tolist(), lengths.tolist())]
        sizes = np.frombuffer(data, np.uint8, d, at).tolist()
        at += d + (-d % 8)
        values = np.frombuffer(data, "<u8", ns, at)
        at += 8 * ns
        small: list[np.ndarray | None] = []
        k = 0
        for n in sizes:
            small.append(values[k : k + n] if n else None)
            k += n
        sk = np.frombuffer(data, np.uint8, d * p, at).reshape(d, p)
        at += d * p
        yield Part(bands, keys, docs, ids, sk, small)


def encode_batch(batch: DocumentBatch) -> bytes:
    """A batch as JSON (it waits in a spill file while the duplicates are found; see ``Dedup``)."""
    docs = [[d.doc_id, d.presegmented, d.paragraphs] for d in batch.documents]
    return json.dumps({"documents": docs, "counters": dict(batch.counters)}, ensure_ascii=False).encode("utf-8")


def decode_batch(data: bytes) -> DocumentBatch:
    d = json.loads(data)
    return DocumentBatch([Document(i, paras, pre) for i, pre, paras in d["documents"]], Counter(d["counters"]))
