"""Stage 5, Create instances: Google's ``create_instances_from_document``, per group and dupe pass.

Same algorithm as the reference (``max_num_tokens = max_seq_length - 3``; a target length per document and
pass, ``randint(2, max_num_tokens)`` with probability ``short_seq_prob``; chunks filled up to the target or
the document's end; A = first ``randint(1, n-1)`` sentences; random-next B from another document of the
group with up to 10 tries, unused sentences put back; truncation of the longer side, front or back with
probability 0.5 each), with two differences that make it parallel and exact:

- Randomness: one ``random.Random`` per (document, pass), seeded from the run seed and the document's
  stable id, instead of one global stream. Any split of a group's documents over workers gives identical
  instances.
- Representation: sentences are token ranges of one flat ``ids`` array, so an instance is four offsets
  ``(a0, a1, b0, b1)``; tokens are gathered for a whole work unit at once (:func:`assemble`).

Speed: :func:`document_instances` is the readable transcription; the pipeline runs a compiled copy of it
(:mod:`bertstream.pipelines.pretraining.kernels.instances`, with a CPython-exact Mersenne Twister), ~14x less CPU per instance
with :func:`assemble`, which tests pin to this module's pure-Python path instance for instance.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.common.ragged import concat_ranges, take_ranges
from bertstream.pipelines.pretraining.kernels import switch
from bertstream.schemas import id_types
from bertstream.schemas import pretraining as P
from bertstream.schemas.hashing import combine, hash64

_POOL_HEADER = struct.Struct("<8sBxxxQQQ")
_POOL_MAGIC = b"BSPOOL01"


@dataclass(slots=True)
class Pool:
    """All tokenized documents of one group, ordered by document key (a seeded hash of the id).

    Document ``d``'s sentences are ``doc_sent[d]:doc_sent[d+1]``; sentence ``s``'s tokens are
    ``ids[sent_tok[s]:sent_tok[s+1]]``.
    """

    doc_keys: np.ndarray  # [D] uint64
    doc_sent: np.ndarray  # [D+1] int64
    sent_tok: np.ndarray  # [S+1] int64
    ids: np.ndarray  # [T] uint16 | int32

    @property
    def num_docs(self) -> int:
        return len(self.doc_keys)

    @classmethod
    def build(
        cls,
        doc_keys: np.ndarray,
        doc_sentences: np.ndarray,
        sentence_lengths: np.ndarray,
        ids: np.ndarray,
        order: np.ndarray | None = None,
    ) -> Pool:
        """From documents in any order: sorts them by key so the pool is the same on every runner.

        ``order`` puts the documents in another order instead (spill files order them by group).
        """
        doc_keys = np.asarray(doc_keys, dtype=np.uint64)
        doc_sentences = np.asarray(doc_sentences, dtype=np.int64)
        sentence_lengths = np.asarray(sentence_lengths, dtype=np.int64)
        if order is None:
            order = np.argsort(doc_keys, kind="stable")
            if np.any(np.diff(doc_keys[order]) == 0):
                raise ValueError("two documents share a 64-bit key: duplicate document ids in the input?")
        doc_sent0 = np.concatenate(([0], np.cumsum(doc_sentences)))
        sent_tok0 = np.concatenate(([0], np.cumsum(sentence_lengths)))
        if sent_tok0[-1] != len(ids):
            raise ValueError(f"sentence lengths sum to {sent_tok0[-1]}, but {len(ids)} tokens were given")
        # Reorder documents: gather sentence ranges, then token ranges, in the new order.
        sent_index = concat_ranges(doc_sent0[order], doc_sent0[order + 1])
        new_lengths = sentence_lengths[sent_index]
        return cls(
            doc_keys=doc_keys[order],
            doc_sent=np.concatenate(([0], np.cumsum(doc_sentences[order]))),
            sent_tok=np.concatenate(([0], np.cumsum(new_lengths))),
            # Documents' tokens are contiguous: gather by document, in bounded steps.
            ids=take_ranges(ids, sent_tok0[doc_sent0[order]], sent_tok0[doc_sent0[order + 1]]),
        )

    def to_bytes(self) -> bytes:
        width = self.ids.dtype.itemsize
        header = _POOL_HEADER.pack(_POOL_MAGIC, width, len(self.doc_keys), len(self.sent_tok) - 1, len(self.ids))
        return b"".join(
            (
                header,
                self.doc_keys.astype("<u8").tobytes(),
                self.doc_sent.astype("<i8").tobytes(),
                self.sent_tok.astype("<i8").tobytes(),
                self.ids.tobytes(),
            )
        )

    def save(self, path: str) -> None:
        """Write to a path on any Beam filesystem (the work directory)."""
        with FileSystems.create(path) as f:
            f.write(self.to_bytes())

    @classmethod
    def load(cls, path: str) -> Pool:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            return cls.from_bytes(f.read())

    @classmethod
    def from_bytes(cls, data: bytes) -> Pool:
        magic, width, d, s, t = _POOL_HEADER.unpack_from(data)
        if magic != _POOL_MAGIC:
            raise ValueError("not a document pool file")
        o = _POOL_HEADER.size
        keys = np.frombuffer(data, "<u8", d, o)
        o += 8 * d
        doc_sent = np.frombuffer(data, "<i8", d + 1, o)
        o += 8 * (d + 1)
        sent_tok = np.frombuffer(data, "<i8", s + 1, o)
        o += 8 * (s + 1)
        ids = np.frombuffer(data, id_types.by_width(width).numpy, t, o)
        return cls(keys, doc_sent, sent_tok, ids).checked()

    def checked(self) -> Pool:
        """Itself, once its offsets are known to be consistent: the compiled kernels do not check bounds,
        so a corrupt pool file must fail here, not read or write out of bounds there."""
        offsets = (("doc_sent", self.doc_sent, len(self.sent_tok) - 1), ("sent_tok", self.sent_tok, len(self.ids)))
        for name, off, total in offsets:
            if len(off) == 0 or off[0] != 0 or off[-1] != total or np.any(np.diff(off) < 0):
                raise ValueError(f"corrupt document pool: {name} is not a ragged offset array over {total} items")
        if len(self.doc_keys) != len(self.doc_sent) - 1:
            raise ValueError("corrupt document pool: one key per document expected")
        return self


def document_key(seed: int, doc_id: str) -> int:
    """A seeded hash of a document's stable id: sorts the pool, seeds its RNG, picks its group."""
    return hash64(seed, doc_id)


def document_rng(doc_key: int, pass_index: int) -> random.Random:
    return random.Random(combine(doc_key, pass_index))


def instance_id(doc_key: int, pass_index: int, index: int) -> int:
    return combine(combine(doc_key, pass_index), index + 1)


def document_instances(
    d: int,
    rng: random.Random,
    doc_sent: list[int],
    sent_tok: list[int],
    max_num_tokens: int,
    short_seq_prob: float,
) -> list[tuple[int, int, int, int, int]]:
    """Instances of document ``d`` as ``(a0, a1, b0, b1, is_random_next)`` token offsets into the pool.

    A line-by-line transcription of the reference, with sentences as offset ranges. ``doc_sent`` and
    ``sent_tok`` are the pool's arrays as Python lists (indexing lists is several times faster).
    """
    n_docs = len(doc_sent) - 1
    s_begin, s_end = doc_sent[d], doc_sent[d + 1]
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    out = []
    chunk_start = s_begin
    current_length = 0
    i = s_begin
    while i < s_end:
        current_length += sent_tok[i + 1] - sent_tok[i]
        if i == s_end - 1 or current_length >= target:
            n_chunk = i - chunk_start + 1
            a_end = rng.randint(1, n_chunk - 1) if n_chunk >= 2 else 1
            a0 = sent_tok[chunk_start]
            a1 = sent_tok[chunk_start + a_end]
            if n_chunk == 1 or rng.random() < 0.5:
                is_random_next = 1
                target_b = target - (a1 - a0)
                r = d
                for _ in range(10):
                    r = rng.randint(0, n_docs - 1)
                    if r != d:
                        break
                r_begin, r_end = doc_sent[r], doc_sent[r + 1]
                j = r_begin + rng.randint(0, r_end - r_begin - 1)
                b0 = sent_tok[j]
                while j < r_end:
                    j += 1
                    if sent_tok[j] - b0 >= target_b:
                        break
                b1 = sent_tok[j]
                i -= n_chunk - a_end  # the chunk's unused sentences are used again
            else:
                is_random_next = 0
                b0 = a1
                b1 = sent_tok[i + 1]
            la, lb = a1 - a0, b1 - b0
            while la + lb > max_num_tokens:
                if la > lb:
                    if rng.random() < 0.5:
                        a0 += 1
                    else:
                        a1 -= 1
                    la -= 1
                else:
                    if rng.random() < 0.5:
                        b0 += 1
                    else:
                        b1 -= 1
                    lb -= 1
            out.append((a0, a1, b0, b1, is_random_next))
            chunk_start = i + 1
            current_length = 0
        i += 1
    return out


@dataclass(slots=True)
class RawInstances:
    """Unmasked instances of one work unit, as offsets into the pool."""

    instance_ids: np.ndarray  # [N] uint64
    spans: np.ndarray  # [N, 4] int64: a0, a1, b0, b1
    is_random_next: np.ndarray  # [N] int8


def unit_instances(
    pool: Pool, pass_index: int, doc_start: int, doc_end: int, max_num_tokens: int, short_seq_prob: float
) -> RawInstances:
    """Instances of documents ``doc_start:doc_end`` of ``pool`` for one dupe pass (compiled).

    Exactly :func:`reference_unit_instances`' output, ~15x faster: the kernel transcribes
    :func:`document_instances` and reproduces ``random.Random`` draw for draw.
    """
    # Imported here, not at the top: numba's import (~0.2 s) is paid only by processes that create instances.
    from bertstream.pipelines.pretraining.kernels import instances as kernel
    from bertstream.pipelines.pretraining.kernels import readonly

    if not 0 <= doc_start <= doc_end <= pool.num_docs:  # the kernel does not check bounds
        raise IndexError(f"documents {doc_start}:{doc_end} of a pool of {pool.num_docs}")
    # Read-only arrays, plain int and float arguments: one compiled specialisation whatever the caller passes.
    ids, spans, nsp = kernel.unit_instances(
        readonly(pool.doc_keys, np.uint64),
        readonly(pool.doc_sent, np.int64),
        readonly(pool.sent_tok, np.int64),
        int(pass_index),
        int(doc_start),
        int(doc_end),
        int(max_num_tokens),
        float(short_seq_prob),
    )
    return RawInstances(instance_ids=ids, spans=spans, is_random_next=nsp)


def reference_unit_instances(
    pool: Pool, pass_index: int, doc_start: int, doc_end: int, max_num_tokens: int, short_seq_prob: float
) -> RawInstances:
    """:func:`unit_instances` in pure Python: :func:`document_instances` per document, with its own
    ``random.Random(combine(key, pass))``. The readable definition that tests pin the kernel to."""
    doc_sent = pool.doc_sent.tolist()
    sent_tok = pool.sent_tok.tolist()
    keys = pool.doc_keys.tolist()
    ids: list[int] = []
    rows: list = []
    for d in range(doc_start, doc_end):
        key = keys[d]
        inst = document_instances(d, document_rng(key, pass_index), doc_sent, sent_tok, max_num_tokens, short_seq_prob)
        ids.extend(instance_id(key, pass_index, k) for k in range(len(inst)))
        rows.extend(inst)
    spans = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
    return RawInstances(
        instance_ids=np.asarray(ids, dtype=np.uint64),
        spans=spans[:, :4],
        is_random_next=spans[:, 4].astype(np.int8),
    )


def assemble(pool: Pool, raw: RawInstances, cls_id: int, sep_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[CLS] A [SEP] B [SEP]`` for every instance at once (compiled; equal to :func:`reference_assemble`).

    Returns ``(ids, offsets, segment_a_length)``: instance ``i`` is ``ids[offsets[i]:offsets[i+1]]``.
    """
    from bertstream.pipelines.pretraining.kernels import instances as kernel  # lazily, as in unit_instances
    from bertstream.pipelines.pretraining.kernels import readonly

    spans = readonly(raw.spans, np.int64).reshape(-1, 4)
    # The kernel does not check bounds: spans must be ranges inside the pool (unit_instances' always are).
    if len(spans) and (spans.min() < 0 or spans.max() > len(pool.ids) or np.any(spans[:, 1::2] < spans[:, 0::2])):
        raise IndexError("instance spans outside the pool's tokens")
    return kernel.assemble(readonly(pool.ids), spans, int(cls_id), int(sep_id))


def reference_assemble(
    pool: Pool, raw: RawInstances, cls_id: int, sep_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`assemble` in NumPy: one gather of five ranges per instance (CLS, A, SEP, B, SEP)."""
    n = len(raw.instance_ids)
    a0, a1, b0, b1 = (raw.spans[:, k] for k in range(4))
    t = len(pool.ids)
    ext = np.concatenate((pool.ids, np.asarray([cls_id, sep_id], dtype=pool.ids.dtype)))
    cls_at = np.full(n, t, dtype=np.int64)
    sep_at = np.full(n, t + 1, dtype=np.int64)
    one = np.ones(n, dtype=np.int64)
    # Five pieces per instance, interleaved: CLS, A, SEP, B, SEP.
    starts = np.stack((cls_at, a0, sep_at, b0, sep_at), axis=1).reshape(-1)
    ends = np.stack((cls_at + one, a1, sep_at + one, b1, sep_at + one), axis=1).reshape(-1)
    ids = ext[concat_ranges(starts, ends)]
    lengths = (a1 - a0) + (b1 - b0) + 3
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    seg_a = (a1 - a0 + 2).astype(np.int16)
    return ids, offsets, seg_a


class _CreateInstancesFn(beam.DoFn):
    def __init__(self, max_num_tokens: int, short_seq_prob: float, cls_id: int, sep_id: int) -> None:
        self.max_num_tokens = max_num_tokens
        self.short_seq_prob = short_seq_prob
        self.cls_id = cls_id
        self.sep_id = sep_id
        self._pool_path: str | None = None
        self._pool: Pool | None = None

    def process(self, unit) -> Iterator[InstanceBatch]:
        # Units of one group usually follow each other; keep the last pool (bounded memory: one pool).
        if unit.pool_path != self._pool_path:
            self._pool = None  # free the last pool before reading the next: one pool in memory, not two
            self._pool = Pool.load(unit.pool_path)
            self._pool_path = unit.pool_path
        pool = self._pool
        # The kernels or the pure-Python paths: identical output (see bertstream.pipelines.pretraining.kernels.switch).
        raw = switch.run(
            unit_instances,
            reference_unit_instances,
            pool,
            unit.pass_index,
            unit.doc_start,
            unit.doc_end,
            self.max_num_tokens,
            self.short_seq_prob,
        )
        ids, offsets, seg_a = switch.run(assemble, reference_assemble, pool, raw, self.cls_id, self.sep_id)
        empty = np.zeros(0, dtype=ids.dtype)
        yield InstanceBatch(
            instance_ids=raw.instance_ids,
            ids=ids,
            offsets=offsets,
            segment_a_length=seg_a,
            next_sentence_label=raw.is_random_next,
            positions=empty.astype(P.POSITION_DTYPE),
            labels=empty,
            pred_offsets=np.zeros(len(raw.instance_ids) + 1, dtype=np.int64),
        )

    def finish_bundle(self) -> None:
        # The DoFn outlives its bundle: a pool kept here would stay resident through the shard writing.
        self._pool, self._pool_path = None, None


class CreateInstances(beam.PTransform):
    """``PCollection[WorkUnit]`` -> ``PCollection[InstanceBatch]`` (not yet masked)."""

    def __init__(self, *, max_num_tokens: int, short_seq_prob: float, cls_id: int, sep_id: int) -> None:
        super().__init__()
        self.fn = _CreateInstancesFn(max_num_tokens, short_seq_prob, cls_id, sep_id)

    def expand(self, units):
        return units | "Pairs" >> beam.ParDo(self.fn)
