"""Last stage: ``manifest.json`` (and ``vocab.txt``) once every shard and extra file is written.

As for pretraining, the manifest is written last and atomically: a failed run leaves none. Shards that
received no rows are written empty, so a dataset always holds exactly ``num_shards`` shards. Counters must
reconcile (``<unit>_read == <unit>_used + dropped``), or the run fails rather than publish wrong figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common.counters import Tally, dropped
from bertstream.pipelines.common.dataset import DatasetHeader, write_text_atomic
from bertstream.pipelines.tasks.kind import LabelMeaning, LabelPlan
from bertstream.pipelines.tasks.labels import task_labels
from bertstream.pipelines.tasks.write import ShardSpec
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo
from bertstream.schemas.vocab import VOCAB_FILENAME


def merge_stats(results: list[dict[str, Any]]) -> dict[str, Any]:
    rows = sum(r["stats"]["rows"] for r in results)
    sequences = sum(r["stats"]["sequences"] for r in results)  # rows, unless a row holds several
    tokens = sum(r["stats"]["tokens"] for r in results)
    out: dict[str, Any] = {
        "rows": rows,
        "tokens": tokens,
        "mean_length": round(tokens / sequences, 2) if sequences else 0.0,
        "max_length": max((r["stats"]["max_length"] for r in results), default=0),
    }
    labels: dict[str, int] = {}
    for r in results:
        for k, v in r["stats"]["label_counts"].items():
            labels[k] = labels.get(k, 0) + v
    if labels:
        out["label_counts"] = dict(sorted(labels.items(), key=lambda kv: int(kv[0])))
    return out


def build_manifest(
    *,
    kind: str,
    unit: str,
    meaning: LabelMeaning,
    results: list[dict[str, Any]],
    tally: Tally,
    labels: list[str],
    plan: LabelPlan,
    header: DatasetHeader,
    files: list[dict[str, Any]],
) -> Manifest:
    results = sorted(results, key=lambda r: r["shard"])
    shards = tuple(ShardInfo(**f) for r in results for f in r["files"])
    counters = tally.counters()
    read, used = counters.get(f"{unit}_read", 0), counters.get(f"{unit}_used", 0)
    beyond = counters.get(f"{unit}_beyond_max_rows", 0)  # --max-rows: left out, not dropped
    drops = dropped(counters, unit)
    if read != used + sum(drops.values()) + beyond:
        raise RuntimeError(
            f"counters do not reconcile: {unit} read {read} != used {used} + dropped {drops} + beyond --max-rows {beyond}"
        )
    stats = merge_stats(results)
    if "label_counts" in stats:  # ids of a counted label: shown by name where they name one
        stats["label_counts"] = meaning.shown(stats["label_counts"], labels)
    rows = sum(s.count for s in shards)
    totals = {"rows": rows, unit: used, "tokens": stats["tokens"], "bytes": {"arrow": sum(s.bytes for s in shards)}}
    for f in files:
        totals["bytes"][f["role"]] = f["bytes"]
    return header.manifest(
        kind=kind,
        shards=shards,
        totals=totals,
        counters=counters,
        statistics=stats,
        task={**task_labels(plan, labels), "files": files},
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class FinalizeTaskSpec:
    """The last stage of a task run: its shards (those that got no rows are written empty), how labels map to
    ids, the manifest's header, and the vocabulary written beside it."""

    shards: ShardSpec
    plan: LabelPlan
    header: DatasetHeader
    vocab_text: str


class _FinalizeFn(beam.DoFn):
    def __init__(self, spec: FinalizeTaskSpec) -> None:
        self.spec = spec.shards
        self.plan = spec.plan
        self.header = spec.header
        self.vocab_text = spec.vocab_text

    def process(self, results: list[dict[str, Any]], tally: Tally, labels: list[str], files: list) -> Iterator[str]:
        results = list(results)
        done = {r["shard"] for r in results}
        for shard in range(self.spec.num_shards):
            if shard not in done:
                results.append(self.spec.write(shard, None, labels))
        manifest = build_manifest(
            kind=self.spec.kind,
            unit=self.spec.unit,
            meaning=self.spec.label,
            results=results,
            tally=tally,
            labels=labels,
            plan=self.plan,
            header=self.header,
            files=[f for group in files for f in group],
        )
        out = self.spec.output_dir
        write_text_atomic(FileSystems.join(out, VOCAB_FILENAME), self.vocab_text)
        write_text_atomic(FileSystems.join(out, MANIFEST_NAME), manifest.to_json())
        yield manifest.to_json()


class FinalizeTask(beam.PTransform):
    """Shard results + tallies + labels + extra files -> ``manifest.json``; yields the manifest text.

    ``files`` is a PCollection of lists of file infos (``{"role", "path", "count", "bytes", "sha256", ...}``).
    """

    def __init__(self, spec: FinalizeTaskSpec, *, tallies, labels, files) -> None:
        super().__init__()
        self.fn = _FinalizeFn(spec)
        self.tallies = tallies
        self.labels = labels
        self.files = files

    def expand(self, results):
        tally = self.tallies | "MergeTallies" >> beam.CombineGlobally(Tally.merge)
        files = self.files | "ListFiles" >> beam.combiners.ToList()
        return (
            results
            | "ListShards" >> beam.combiners.ToList()
            | "WriteManifest"
            >> beam.ParDo(
                self.fn,
                tally=beam.pvalue.AsSingleton(tally),
                labels=beam.pvalue.AsSingleton(self.labels),
                files=beam.pvalue.AsSingleton(files),
            )
        )
