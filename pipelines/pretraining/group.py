"""Stage 4, Group: documents -> bounded groups -> work units, with memory bounded by a group.

A document's group follows from its seeded key: the high 32 bits of ``mix64(key)`` cut into ``G`` equal
ranges (:func:`group_of`), where ``G`` follows from the global document and token counts (``num_groups``):
groups hold about ``docs_per_group`` documents and at most ``max_group_tokens`` tokens, so random-next
sentences come from thousands of other documents. ``G`` depends only on the data and the parameters, never
on the runner.

The shuffle carries references, not tokens (see :mod:`bertstream.pipelines.common.spill`):

1. ``SpillDocuments``: each worker buffers tokenized documents and writes them to a spill file, sorted by
   ``mix64(key)``. Any group is then one contiguous run of documents in every spill file, whatever ``G``
   turns out to be, so the spill needs no global count first (which would hold every token in the runner).
2. ``PlanGroups``: once ``G`` is known, each spill file's small index (8 bytes per document and 16 bytes of
   offsets) gives every group's byte ranges in it; only those references go through the ``GroupByKey``, one
   per block of consecutive groups beyond 256 groups (``spill.keys_per_block``).
3. ``BuildPool``: a group's parts are read back and sorted by key into a :class:`~bertstream.pipelines.pretraining.instances.Pool`,
   written to a pool file; the group fans out into work units (pass, document range) of about
   ``tokens_per_unit`` tokens, which any worker processes by reading the pool file.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import progress as P
from bertstream.pipelines.common.spill import ByteRange, SpillFn, key_blocks, read_ranges, spill_path, write_file
from bertstream.pipelines.pretraining.instances import Pool, document_key
from bertstream.pipelines.pretraining.tokenize import TokenizedBatch
from bertstream.schemas import id_types
from bertstream.schemas.hashing import mix64, mix64_array

_HEADER = struct.Struct("<8sB7xQQQ")
_MAGIC = b"BSDOCS01"


@dataclass(frozen=True, slots=True)
class WorkUnit:
    pool_path: str
    group: int
    pass_index: int
    doc_start: int
    doc_end: int


def num_groups(num_docs: int, num_tokens: int, docs_per_group: int, max_group_tokens: int) -> int:
    return max(1, math.ceil(num_docs / docs_per_group), math.ceil(num_tokens / max_group_tokens))


def group_of(doc_key: int, groups: int) -> int:
    """The group of a document: a range of ``mix64(key)``'s high 32 bits (same as :func:`groups_of`)."""
    return ((mix64(doc_key) >> 32) * groups) >> 32


def groups_of(mixed: np.ndarray, groups: int) -> np.ndarray:
    """:func:`group_of` for ``mixed = mix64_array(keys)``; non-decreasing where ``mixed`` is sorted."""
    # hi < 2**32 and groups < 2**32: the product fits in 64 bits.
    return ((mixed >> np.uint64(32)) * np.uint64(groups)) >> np.uint64(32)


# --- spill files of tokenized documents --------------------------------------------------------------
# Layout: header (magic, id width, D, S, T), then columns: keys u64[D] (ordered by mix64(key)),
# doc_sent i64[D+1] and doc_tok i64[D+1] (cumulative sentence and token counts), sentence lengths
# i32[S], token ids [T] (uint16 or int32).


@dataclass(frozen=True, slots=True)
class DocsLayout:
    width: int
    docs: int
    sentences: int
    tokens: int

    @property
    def keys_at(self) -> int:
        return _HEADER.size

    @property
    def doc_sent_at(self) -> int:
        return self.keys_at + 8 * self.docs

    @property
    def doc_tok_at(self) -> int:
        return self.doc_sent_at + 8 * (self.docs + 1)

    @property
    def sent_at(self) -> int:
        return self.doc_tok_at + 8 * (self.docs + 1)

    @property
    def ids_at(self) -> int:
        return self.sent_at + 4 * self.sentences

    def part(self, d0: int, d1: int, s0: int, s1: int, t0: int, t1: int) -> tuple[ByteRange, ...]:
        """Byte ranges of documents ``d0:d1`` (sentences ``s0:s1``, tokens ``t0:t1``) in each column."""
        return (
            (self.keys_at + 8 * d0, 8 * (d1 - d0)),
            (self.doc_sent_at + 8 * d0, 8 * (d1 - d0 + 1)),
            (self.sent_at + 4 * s0, 4 * (s1 - s0)),
            (self.ids_at + self.width * t0, self.width * (t1 - t0)),
        )


# A group's part in one spill file: (path, id width, byte ranges of keys, doc_sent, sentence lengths, ids).
GroupPart = tuple[str, int, tuple[ByteRange, ...]]
# A block of consecutive groups in one spill file: (path, id width, int64 [groups in block, 8]: the four
# (offset, length) ranges of each group, zero lengths where a group has no documents in the file).
BlockPart = tuple[str, int, bytes]


def encode_documents(batches: list[TokenizedBatch], seed: int) -> tuple[np.ndarray, Iterator[bytes]]:
    """Documents of several batches in spill order: (their keys in that order, the file's chunks, encoded
    one column at a time)."""
    keys = np.asarray([document_key(seed, d) for b in batches for d in b.doc_ids], dtype=np.uint64)
    pool = Pool.build(
        keys,
        np.concatenate([b.doc_sentences for b in batches]),
        np.concatenate([b.sentence_lengths for b in batches]),
        np.concatenate([b.ids for b in batches]),
        order=np.argsort(mix64_array(keys), kind="stable"),
    )

    def chunks() -> Iterator[bytes]:
        yield _HEADER.pack(_MAGIC, pool.ids.dtype.itemsize, pool.num_docs, len(pool.sent_tok) - 1, len(pool.ids))
        yield pool.doc_keys.astype("<u8").tobytes()
        yield pool.doc_sent.astype("<i8").tobytes()
        yield pool.sent_tok[pool.doc_sent].astype("<i8").tobytes()
        yield np.diff(pool.sent_tok).astype("<i4").tobytes()
        yield pool.ids.tobytes()

    return pool.doc_keys, chunks()


def plan_parts(path: str, groups: int) -> Iterator[tuple[int, BlockPart]]:
    """Every group's byte ranges in one spill file (reads only its index), one reference per block of groups."""
    (head,) = read_ranges(path, [(0, _HEADER.size)])
    magic, width, d, s, t = _HEADER.unpack(head)
    if magic != _MAGIC:
        raise ValueError(f"{path}: not a document spill file")
    layout = DocsLayout(width, d, s, t)
    raw_keys, raw_sent, raw_tok = read_ranges(
        path, [(layout.keys_at, 8 * d), (layout.doc_sent_at, 8 * (d + 1)), (layout.doc_tok_at, 8 * (d + 1))]
    )
    gid = groups_of(mix64_array(np.frombuffer(raw_keys, "<u8")), groups)
    doc_sent, doc_tok = np.frombuffer(raw_sent, "<i8"), np.frombuffer(raw_tok, "<i8")
    bounds = np.searchsorted(gid, np.arange(groups + 1, dtype=np.uint64)).tolist()
    for block, keys in enumerate(key_blocks(groups)):
        rows = np.zeros((len(keys), 8), dtype="<i8")
        for i, g in enumerate(keys):
            d0, d1 = bounds[g], bounds[g + 1]
            if d1 > d0:
                ranges = layout.part(d0, d1, int(doc_sent[d0]), int(doc_sent[d1]), int(doc_tok[d0]), int(doc_tok[d1]))
                rows[i] = [x for r in ranges for x in r]
        if rows[:, 1].any():
            yield block, (path, width, rows.tobytes())


def group_parts(parts: Iterable[BlockPart], index: int) -> list[GroupPart]:
    """The parts of the block's ``index``-th group, in each spill file that holds some of its documents."""
    out = []
    for path, width, rows in parts:
        row = np.frombuffer(rows, "<i8", 8, 64 * index).tolist()
        if row[1]:  # documents in this file
            out.append((path, width, tuple(zip(row[0::2], row[1::2]))))
    return out


def read_group(parts: Iterable[GroupPart]) -> Pool:
    """A group's documents from all its parts, sorted by key (the same pool on every runner)."""
    keys, doc_sents, sent_lens, ids = [], [], [], []
    dtype = None
    for path, width, ranges in parts:
        k, ds, sl, t = read_ranges(path, ranges)
        dtype = id_types.by_width(width).numpy
        keys.append(np.frombuffer(k, "<u8"))
        doc_sents.append(np.diff(np.frombuffer(ds, "<i8")))
        sent_lens.append(np.frombuffer(sl, "<i4"))
        ids.append(np.frombuffer(t, dtype))
    if dtype is None:
        raise ValueError("a group without parts")
    return Pool.build(np.concatenate(keys), np.concatenate(doc_sents), np.concatenate(sent_lens), np.concatenate(ids))


def unit_ranges(pool: Pool, tokens_per_unit: int) -> list[tuple[int, int]]:
    """The pool's documents cut into ranges of about ``tokens_per_unit`` tokens."""
    doc_tokens = np.diff(pool.sent_tok[pool.doc_sent])
    ranges = []
    start, acc = 0, 0
    for d, t in enumerate(doc_tokens.tolist()):
        acc += t
        if acc >= tokens_per_unit:
            ranges.append((start, d + 1))
            start, acc = d + 1, 0
    if start < pool.num_docs:
        ranges.append((start, pool.num_docs))
    return ranges


def plan_units(pool: Pool, pool_path: str, group: int, dupe_factor: int, tokens_per_unit: int) -> list[WorkUnit]:
    """Work units: every pass of every document range (:func:`unit_ranges`)."""
    ranges = unit_ranges(pool, tokens_per_unit)
    return [WorkUnit(pool_path, group, p, a, b) for p in range(dupe_factor) for a, b in ranges]


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupSpec:
    """The grouping stage: how documents are spread over groups (``num_groups``), how many passes each group
    makes (``dupe_factor``), how much of a group one work unit takes, and the spill folder."""

    seed: int
    docs_per_group: int
    max_group_tokens: int
    dupe_factor: int
    tokens_per_unit: int
    work_dir: str


class _SpillDocumentsFn(SpillFn):
    def __init__(self, work_dir: str, seed: int) -> None:
        super().__init__(work_dir)
        self.seed = seed

    def size(self, batch: TokenizedBatch) -> int:
        return batch.ids.nbytes + 4 * len(batch.sentence_lengths) + 64 * len(batch.doc_ids)

    def spill(self, batches: list[TokenizedBatch]) -> Iterator[str]:
        batches = [b for b in batches if b.doc_ids]
        if not batches:
            return
        keys, chunks = encode_documents(batches, self.seed)
        path = spill_path(self.work_dir, "docs", [keys.tobytes()])
        write_file(path, chunks)
        yield path


class _PlanGroupsFn(beam.DoFn):
    def process(self, path: str, groups: int) -> Iterator[tuple[int, BlockPart]]:
        yield from plan_parts(path, groups)


class _BuildPoolFn(beam.DoFn):
    def __init__(self, spec: GroupSpec) -> None:
        self.work_dir = spec.work_dir
        self.dupe_factor = spec.dupe_factor
        self.tokens_per_unit = spec.tokens_per_unit

    def process(self, element: tuple[int, Iterable[BlockPart]], groups: int):
        block, parts = element
        parts = list(parts)
        for i, group in enumerate(key_blocks(groups)[block]):
            found = group_parts(parts, i)
            if found:
                yield from self.build(group, found)

    def build(self, group: int, parts: list[GroupPart]):
        pool = read_group(parts)
        path = FileSystems.join(self.work_dir, f"pool-{group:06d}.bin")
        pool.save(path)
        yield beam.pvalue.TaggedOutput("groups", {"group": group, "documents": pool.num_docs, "tokens": len(pool.ids)})
        units = plan_units(pool, path, group, self.dupe_factor, self.tokens_per_unit)
        P.add("groups", final=True, groups=1, units=len(units))
        P.detail(f"group {group}: {pool.num_docs} documents, {len(pool.ids)} tokens -> {len(units)} work units")
        yield from units


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    d = t = 0
    for a, b in pairs:
        d += a
        t += b
    return d, t


class GroupDocuments(beam.PTransform):
    """``PCollection[TokenizedBatch]`` -> (``PCollection[WorkUnit]``, ``PCollection[dict]`` of group sizes)."""

    def __init__(self, spec: GroupSpec) -> None:
        super().__init__()
        self.spec = spec

    def expand(self, batches):
        spec = self.spec
        dpg, mgt = spec.docs_per_group, spec.max_group_tokens
        # No input, no sum: the side input's default is what the sum of nothing gives (CombineGlobally's own
        # default is four more transforms and a stage, which every run's start-up paid).
        groups = (
            batches
            | "Sizes" >> beam.Map(lambda b: (len(b.doc_ids), len(b.ids)))
            | "SumSizes" >> beam.CombineGlobally(_sum_pairs).without_defaults()
            | "NumGroups" >> beam.Map(lambda s: num_groups(s[0], s[1], dpg, mgt))
        )
        none = num_groups(0, 0, dpg, mgt)
        built = (
            batches
            | "SpillDocuments" >> beam.ParDo(_SpillDocumentsFn(spec.work_dir, spec.seed))
            | "PlanGroups" >> beam.ParDo(_PlanGroupsFn(), groups=beam.pvalue.AsSingleton(groups, default_value=none))
            | "CollectGroup" >> beam.GroupByKey()
            | "BuildPool"
            >> beam.ParDo(
                _BuildPoolFn(spec),
                groups=beam.pvalue.AsSingleton(groups, default_value=none),
            ).with_outputs("groups", main="units")
        )
        # Spread units over workers: a group's units are emitted together, in one bundle.
        units = built.units | "SpreadUnits" >> beam.Reshuffle()
        return units, built.groups
