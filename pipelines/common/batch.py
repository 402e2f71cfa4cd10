"""InstanceBatch: finished (masked) instances as ragged NumPy columns, with a compact wire format.

Batches, not instances, are Beam elements (the local runner costs ~25 us per element and stage), and they
cross stage boundaries as one ``bytes`` value: no pickled arrays.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from bertstream.pipelines.common.ragged import concat_ranges, take_ranges
from bertstream.schemas import id_types
from bertstream.schemas import pretraining as P

_WIRE = struct.Struct("<4sB3xQQQ")
_MAGIC = b"BSIB"


@dataclass(slots=True)
class InstanceBatch:
    instance_ids: np.ndarray  # [N] uint64
    ids: np.ndarray  # [sum L] uint16 | int32, masked input ids with specials
    offsets: np.ndarray  # [N+1] int64
    segment_a_length: np.ndarray  # [N] int16
    next_sentence_label: np.ndarray  # [N] int8
    positions: np.ndarray  # [P] uint16
    labels: np.ndarray  # [P] same dtype as ids
    pred_offsets: np.ndarray  # [N+1] int64

    def __len__(self) -> int:
        return len(self.instance_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_predictions(self) -> np.ndarray:
        return np.diff(self.pred_offsets)

    def take(self, index: np.ndarray) -> InstanceBatch:
        """Rows ``index`` (in that order)."""
        index = np.asarray(index, dtype=np.int64)
        starts, ends = self.offsets[index], self.offsets[index + 1]
        pstarts, pends = self.pred_offsets[index], self.pred_offsets[index + 1]
        pred = concat_ranges(pstarts, pends)  # once for positions and labels
        return InstanceBatch(
            instance_ids=self.instance_ids[index],
            ids=take_ranges(self.ids, starts, ends),  # bounded steps: no token-sized int64 index
            offsets=np.concatenate(([0], np.cumsum(ends - starts))).astype(np.int64, copy=False),
            segment_a_length=self.segment_a_length[index],
            next_sentence_label=self.next_sentence_label[index],
            positions=self.positions[pred],
            labels=self.labels[pred],
            pred_offsets=np.concatenate(([0], np.cumsum(pends - pstarts))).astype(np.int64, copy=False),
        )

    def slice(self, start: int, stop: int) -> InstanceBatch:
        """Rows ``start:stop`` as views (offsets rebased), no copy of the ids."""
        o0, o1 = int(self.offsets[start]), int(self.offsets[stop])
        p0, p1 = int(self.pred_offsets[start]), int(self.pred_offsets[stop])
        return InstanceBatch(
            instance_ids=self.instance_ids[start:stop],
            ids=self.ids[o0:o1],
            offsets=self.offsets[start : stop + 1] - o0,
            segment_a_length=self.segment_a_length[start:stop],
            next_sentence_label=self.next_sentence_label[start:stop],
            positions=self.positions[p0:p1],
            labels=self.labels[p0:p1],
            pred_offsets=self.pred_offsets[start : stop + 1] - p0,
        )

    @classmethod
    def concat(cls, batches: Sequence[InstanceBatch]) -> InstanceBatch:
        if not batches:
            raise ValueError("no batches to concatenate")
        if len(batches) == 1:
            return batches[0]

        def offsets(name: str) -> np.ndarray:
            parts = [np.diff(getattr(b, name)) for b in batches]
            return np.concatenate(([0], np.cumsum(np.concatenate(parts)))).astype(np.int64)

        return cls(
            instance_ids=np.concatenate([b.instance_ids for b in batches]),
            ids=np.concatenate([b.ids for b in batches]),
            offsets=offsets("offsets"),
            segment_a_length=np.concatenate([b.segment_a_length for b in batches]),
            next_sentence_label=np.concatenate([b.next_sentence_label for b in batches]),
            positions=np.concatenate([b.positions for b in batches]),
            labels=np.concatenate([b.labels for b in batches]),
            pred_offsets=offsets("pred_offsets"),
        )

    def to_bytes(self) -> bytes:
        width = self.ids.dtype.itemsize
        head = _WIRE.pack(_MAGIC, width, len(self), len(self.ids), len(self.positions))
        return b"".join(
            (
                head,
                self.instance_ids.astype("<u8").tobytes(),
                self.offsets.astype("<i8").tobytes(),
                self.segment_a_length.astype("<i2").tobytes(),
                self.next_sentence_label.astype("i1").tobytes(),
                self.pred_offsets.astype("<i8").tobytes(),
                self.ids.tobytes(),
                self.positions.astype(P.POSITION_DTYPE).tobytes(),
                self.labels.tobytes(),
            )
        )

    WIRE_HEADER_BYTES = _WIRE.size

    @staticmethod
    def wire_sizes(head: bytes) -> tuple[int, int, int, int]:
        """``(id width, rows, ids, predictions)`` from the first ``WIRE_HEADER_BYTES`` of the wire bytes."""
        magic, width, n, t, p = _WIRE.unpack_from(head)
        if magic != _MAGIC:
            raise ValueError("not an InstanceBatch")
        return width, n, t, p

    @classmethod
    def concat_wire(cls, sizes: Sequence[tuple[int, int, int, int]], parts: Iterable[bytes]) -> InstanceBatch:
        """The concatenation of wire-encoded batches, decoded one at a time into arrays allocated once
        (``sizes`` from :meth:`wire_sizes`): memory holds the result and one part, never all parts too."""
        width = sizes[0][0] if sizes else 2
        dt = id_types.by_width(width).numpy
        n, t, p = (sum(s[k] for s in sizes) for k in (1, 2, 3))
        out = cls(
            instance_ids=np.empty(n, np.uint64),
            ids=np.empty(t, dt),
            offsets=np.zeros(n + 1, np.int64),
            segment_a_length=np.empty(n, np.int16),
            next_sentence_label=np.empty(n, np.int8),
            positions=np.empty(p, P.POSITION_DTYPE),
            labels=np.empty(p, dt),
            pred_offsets=np.zeros(n + 1, np.int64),
        )
        rn = rt = rp = 0
        for data in parts:
            b = cls.from_bytes(data)
            k, kt, kp = len(b), len(b.ids), len(b.positions)
            out.instance_ids[rn : rn + k] = b.instance_ids
            out.ids[rt : rt + kt] = b.ids
            out.offsets[rn + 1 : rn + k + 1] = b.offsets[1:] + rt
            out.segment_a_length[rn : rn + k] = b.segment_a_length
            out.next_sentence_label[rn : rn + k] = b.next_sentence_label
            out.positions[rp : rp + kp] = b.positions
            out.labels[rp : rp + kp] = b.labels
            out.pred_offsets[rn + 1 : rn + k + 1] = b.pred_offsets[1:] + rp
            rn, rt, rp = rn + k, rt + kt, rp + kp
        if (rn, rt, rp) != (n, t, p):
            raise ValueError(f"wire parts hold {(rn, rt, rp)} rows/ids/predictions, their headers said {(n, t, p)}")
        return out

    @classmethod
    def from_bytes(cls, data: bytes) -> InstanceBatch:
        magic, width, n, t, p = _WIRE.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("not an InstanceBatch")
        dt = id_types.by_width(width).numpy
        o = _WIRE.size

        def take(dtype: str | np.dtype, count: int) -> np.ndarray:
            nonlocal o
            a = np.frombuffer(data, dtype, count, o)
            o += a.nbytes
            return a

        instance_ids = take("<u8", n)
        offsets = take("<i8", n + 1)
        seg_a = take("<i2", n)
        nsp = take("i1", n)
        pred_offsets = take("<i8", n + 1)
        ids = take(dt, t)
        positions = take(P.POSITION_DTYPE, p)
        labels = take(dt, p)
        return cls(instance_ids, ids, offsets, seg_a, nsp, positions, labels, pred_offsets)
