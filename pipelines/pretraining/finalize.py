"""Last stage: write ``manifest.json`` (and ``vocab.txt``) once every shard is written.

The manifest is written last and atomically, so a failed run leaves no manifest: readers trust only
directories that have one. Shards that received no instances are still written (empty, valid files), so a
dataset always holds exactly ``num_shards`` shards per format.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.combiners import ToListCombineFn

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import source_stats as SS
from bertstream.pipelines.common.batch import InstanceBatch
from bertstream.pipelines.common.combine import CombineEach
from bertstream.pipelines.common.dataset import DatasetHeader, write_text_atomic
from bertstream.pipelines.common.spill import remove_work_dir
from bertstream.pipelines.pretraining import stats as S
from bertstream.pipelines.pretraining.shipped import Shipped, resolve
from bertstream.pipelines.pretraining.write import ShardSpec
from bertstream.schemas import pretraining as P
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo
from bertstream.schemas.vocab import VOCAB_FILENAME, Vocab


def empty_batch(dtype: str) -> InstanceBatch:
    z = np.zeros(0, dtype=np.int64)
    return InstanceBatch(
        z.astype(np.uint64),
        z.astype(dtype),
        np.zeros(1, np.int64),
        z.astype(np.int16),
        z.astype(np.int8),
        z.astype(P.POSITION_DTYPE),
        z.astype(dtype),
        np.zeros(1, np.int64),
    )


def build_manifest(
    *,
    kind: str,
    results: list[dict[str, Any]],
    counters: dict[str, int],
    groups: list[dict[str, Any]],
    header: DatasetHeader,
    max_seq_length: int,
    unk_words: dict[str, Any] | None = None,
    extra_statistics: dict[str, Any] | None = None,
) -> Manifest:
    results = sorted(results, key=lambda r: r["shard"])
    shards = tuple(ShardInfo(**f) for r in results for f in r["files"])
    raw = S.merge(r["stats"] for r in results)
    summary = S.summarize(raw, max_seq_length)
    counters = SS.bounded_sources(counters)
    counters[C.INSTANCES] = raw.get("instances", 0)
    totals = {"instances": raw.get("instances", 0), "tokens": raw.get("tokens", 0), "bytes": {}}
    for s in shards:
        totals["bytes"][s.format] = totals["bytes"].get(s.format, 0) + s.bytes
    if totals["instances"]:
        totals["bytes_per_instance"] = {f: round(b / totals["instances"], 1) for f, b in totals["bytes"].items()}
    docs = [g["documents"] for g in groups]
    summary["groups"] = {
        "count": len(groups),
        "min_documents": min(docs, default=0),
        "max_documents": max(docs, default=0),
    }
    if unk_words is not None:
        summary["unk_words"] = unk_words  # source_stats.summary: the words that became [UNK]
    summary.update(extra_statistics or {})  # e.g. the dedup stage's sample of removed ids
    read, used = counters.get(C.DOCUMENTS_READ, 0), counters.get(C.DOCUMENTS_USED, 0)
    drops, held = C.dropped(counters), counters.get(C.DOCUMENTS_HELD_OUT, 0)
    if read != used + sum(drops.values()) + held:
        raise RuntimeError(
            f"counters do not reconcile: documents read {read} != used {used} + dropped {drops} + held out {held}"
        )
    # A runner that loses elements (a bundle's last spill, say) must fail the run, not publish less.
    grouped = sum(docs)
    if grouped != used:
        raise RuntimeError(f"documents lost between tokenizing and grouping: {used} used, {grouped} in groups")
    created = counters.get(C.INSTANCES_CREATED, 0)
    if created != totals["instances"]:
        raise RuntimeError(f"instances lost before the shards: {created} created, {totals['instances']} written")
    if counters.get(C.TOKENIZER_FALLBACK) and "tokenizer" in header.run:
        tokenizer = {**header.run["tokenizer"], "fallback_documents": counters[C.TOKENIZER_FALLBACK]}
        header = replace(header, run={**header.run, "tokenizer": tokenizer})
    return header.manifest(
        kind=kind,
        shards=shards,
        totals=totals,
        counters=counters,
        statistics=summary,
        bytes_read=counters.get(C.BYTES_READ),  # none: an --eval-fraction dataset's (its run's reading is the other's)
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class FinalizeSpec:
    """The last stage: the shards to complete (those that got no instances are written empty), the manifest's
    header, the vocabulary written beside it (``vocab.txt``), and the spill folder removed once the manifest is out."""

    shards: ShardSpec
    header: DatasetHeader
    vocab: Vocab | Shipped[Vocab]
    work_dir: str
    max_seq_length: int


class _FinalizeFn(beam.DoFn):
    def __init__(self, spec: FinalizeSpec) -> None:
        self.spec = spec

    def process(self, collected: dict[str, Any], statistics: dict[str, Any] | None = None) -> Iterator[str]:
        results, counters, groups = list(collected["results"]), collected["counters"], collected["groups"]
        spec = self.spec
        done = {r["shard"] for r in results}
        for shard in range(spec.shards.num_shards):
            if shard in done:
                continue
            files = []
            for writer in spec.shards.writers(shard):
                with writer:
                    writer.write(empty_batch(spec.shards.id_type))
                files.append(writer.written())
            results.append({"shard": shard, "files": files, "stats": {}})
        manifest = build_manifest(
            kind="pretraining",
            results=results,
            counters=counters,
            groups=groups,
            header=spec.header,
            max_seq_length=spec.max_seq_length,
            unk_words=collected.get("unk_words"),
            extra_statistics=statistics,
        )
        out = spec.shards.output_dir
        write_text_atomic(FileSystems.join(out, VOCAB_FILENAME), resolve(spec.vocab).text())
        write_text_atomic(FileSystems.join(out, MANIFEST_NAME), manifest.to_json())
        remove_work_dir(spec.work_dir)
        yield manifest.to_json()


class Finalize(beam.PTransform):
    """Shard results + counters + group sizes -> ``manifest.json``; yields the manifest text. The four are
    combined in one step (:class:`~bertstream.pipelines.common.combine.CombineEach`), not four."""

    def __init__(self, spec: FinalizeSpec, *, counters, groups, unk_words=None, statistics=None) -> None:
        super().__init__()
        self.fn = _FinalizeFn(spec)
        self.counters = counters
        self.groups = groups
        self.unk_words = unk_words  # optional: each batch's [UNK] word counts (TokenizedBatch.unk_words)
        self.statistics = statistics  # optional: one dict merged into the statistics (the dedup stage's)

    def expand(self, results):
        parts = {"results": results, "counters": self.counters, "groups": self.groups}
        fns = {"results": ToListCombineFn(), "counters": C.MergeCounters(), "groups": ToListCombineFn()}
        if self.unk_words is not None:
            parts["unk_words"], fns["unk_words"] = self.unk_words, SS.UnkWordsFn()
        side = {} if self.statistics is None else {"statistics": beam.pvalue.AsSingleton(self.statistics)}
        return parts | "Collect" >> CombineEach(fns) | "WriteManifest" >> beam.ParDo(self.fn, **side)
