"""Stage 4, Group: documents -> bounded groups -> work units.

A document's group is a hash of its seeded key modulo ``G``, where ``G`` follows from the global document and
token counts (``num_groups``): groups hold about ``docs_per_group`` documents and at most
``max_group_tokens`` tokens, so random-next sentences come from thousands of other documents while memory
stays bounded on any runner. ``G`` depends only on the data and the parameters, never on the runner.

Each group's documents are sorted by key into a :class:`~pipelines.instances.Pool` written to a pool file
under the work directory; the group then fans out into work units (pass, document range) of about
``tokens_per_unit`` tokens, which any worker can process by reading the pool file. This parallelises instance
creation inside a group without shipping the group's tokens with every unit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from pipelines import counters as C
from pipelines.hashing import mix64
from pipelines.instances import Pool, document_key
from pipelines.ragged import concat_ranges
from pipelines.tokenize import TokenizedBatch


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
    return mix64(doc_key) % groups


# A pack is a TokenizedBatch subset as plain bytes: cheap for every Beam coder, no pickled arrays.
Pack = tuple[bytes, bytes, bytes, bytes, str]


def split_by_group(batch: TokenizedBatch, seed: int, groups: int) -> dict[int, Pack]:
    keys = np.asarray([document_key(seed, d) for d in batch.doc_ids], dtype=np.uint64)
    if not len(keys):
        return {}
    gid = np.asarray([group_of(int(k), groups) for k in keys.tolist()], dtype=np.int64)
    sent_end = np.cumsum(batch.doc_sentences)
    sent_start = sent_end - batch.doc_sentences
    tok_ends = np.concatenate(([0], np.cumsum(batch.sentence_lengths, dtype=np.int64)))
    out = {}
    for g in np.unique(gid).tolist():
        docs = np.flatnonzero(gid == g)
        s_idx = concat_ranges(sent_start[docs], sent_end[docs])
        t_idx = concat_ranges(tok_ends[sent_start[docs]], tok_ends[sent_end[docs]])
        out[g] = (
            keys[docs].tobytes(),
            batch.doc_sentences[docs].astype(np.int32).tobytes(),
            batch.sentence_lengths[s_idx].astype(np.int32).tobytes(),
            batch.ids[t_idx].tobytes(),
            batch.ids.dtype.str,
        )
    return out


def build_pool(packs: Iterable[Pack]) -> Pool:
    keys, doc_sents, sent_lens, ids = [], [], [], []
    dtype = None
    for k, ds, sl, t, dt in packs:
        keys.append(np.frombuffer(k, np.uint64))
        doc_sents.append(np.frombuffer(ds, np.int32))
        sent_lens.append(np.frombuffer(sl, np.int32))
        ids.append(np.frombuffer(t, dt))
        dtype = dt
    return Pool.build(np.concatenate(keys), np.concatenate(doc_sents), np.concatenate(sent_lens), np.concatenate(ids).astype(dtype))


def plan_units(pool: Pool, pool_path: str, group: int, dupe_factor: int, tokens_per_unit: int) -> list[WorkUnit]:
    """Cut the pool's documents into ranges of about ``tokens_per_unit`` tokens, for every pass."""
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
    return [WorkUnit(pool_path, group, p, a, b) for p in range(dupe_factor) for a, b in ranges]


class _KeyByGroupFn(beam.DoFn):
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def process(self, batch: TokenizedBatch, groups: int) -> Iterator[tuple[int, Pack]]:
        yield from split_by_group(batch, self.seed, groups).items()


class _BuildPoolFn(beam.DoFn):
    def __init__(self, work_dir: str, dupe_factor: int, tokens_per_unit: int) -> None:
        self.work_dir = work_dir
        self.dupe_factor = dupe_factor
        self.tokens_per_unit = tokens_per_unit

    def process(self, element: tuple[int, Iterable[Pack]]):
        group, packs = element
        pool = build_pool(packs)
        path = FileSystems.join(self.work_dir, f"pool-{group:06d}.bin")
        pool.save(path)
        yield beam.pvalue.TaggedOutput("groups", {"group": group, "documents": pool.num_docs, "tokens": len(pool.ids)})
        units = plan_units(pool, path, group, self.dupe_factor, self.tokens_per_unit)
        C.progress(f"group {group}: {pool.num_docs} documents, {len(pool.ids)} tokens -> {len(units)} work units")
        yield from units


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    d = t = 0
    for a, b in pairs:
        d += a
        t += b
    return d, t


class GroupDocuments(beam.PTransform):
    """``PCollection[TokenizedBatch]`` -> (``PCollection[WorkUnit]``, ``PCollection[dict]`` of group sizes)."""

    def __init__(self, *, seed: int, docs_per_group: int, max_group_tokens: int, dupe_factor: int,
                 tokens_per_unit: int, work_dir: str) -> None:
        super().__init__()
        self.seed = seed
        self.docs_per_group = docs_per_group
        self.max_group_tokens = max_group_tokens
        self.dupe_factor = dupe_factor
        self.tokens_per_unit = tokens_per_unit
        self.work_dir = work_dir

    def expand(self, batches):
        dpg, mgt = self.docs_per_group, self.max_group_tokens
        groups = (
            batches
            | "Sizes" >> beam.Map(lambda b: (len(b.doc_ids), len(b.ids)))
            | "SumSizes" >> beam.CombineGlobally(_sum_pairs)
            | "NumGroups" >> beam.Map(lambda s: num_groups(s[0], s[1], dpg, mgt))
        )
        built = (
            batches
            | "KeyByGroup" >> beam.ParDo(_KeyByGroupFn(self.seed), groups=beam.pvalue.AsSingleton(groups))
            | "CollectGroup" >> beam.GroupByKey()
            | "BuildPool" >> beam.ParDo(_BuildPoolFn(self.work_dir, self.dupe_factor, self.tokens_per_unit)).with_outputs(
                "groups", main="units"
            )
        )
        # Spread units over workers: a group's units are emitted together, in one bundle.
        units = built.units | "SpreadUnits" >> beam.Reshuffle()
        return units, built.groups
