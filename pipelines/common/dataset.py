"""A dataset on disk, for every job that writes one: how many shards it gets (:class:`ShardSizing`), its
manifest's header before any shard exists (:class:`DatasetHeader`), the manifest read back
(:func:`read_result`, :func:`load_manifest`) and taken away (:func:`unpublish`). The run that writes it,
with its runner, is :mod:`bertstream.pipelines.runners.dataset_run`'s."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import check
from bertstream.pipelines.common import literal
from bertstream.pipelines.common.files import read_whole, served
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo
from bertstream.schemas.vocab import VOCAB_FILENAME


@dataclass(frozen=True, slots=True)
class ShardSizing:
    """How many shards a run writes when ``--num-shards`` is not given: about ``bytes_per_shard`` of input
    each, clamped to ``[at_least, at_most]``."""

    bytes_per_shard: int
    at_least: int = 1
    at_most: int | None = None

    def __post_init__(self) -> None:
        check(self.bytes_per_shard >= 1, "bytes_per_shard", f"must be >= 1, got {self.bytes_per_shard}")
        check(self.at_least >= 1, "at_least", f"must be >= 1, got {self.at_least}")
        at_most = self.at_most
        check(at_most is None or at_most >= self.at_least, "at_most", f"must be >= at_least, got {at_most}")

    def num_shards(self, input_bytes: int) -> int:
        n = max(self.at_least, math.ceil(input_bytes / self.bytes_per_shard))
        return n if self.at_most is None else min(self.at_most, n)


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetHeader:
    """What a dataset's manifest says before any shard exists: its vocabulary, parameters, seed, inputs and
    run (``vocab_entry``, ``run_entry``), and for a task dataset its task entry. The finalize stage of each
    job adds shards, totals and statistics."""

    vocab: dict[str, Any]
    parameters: dict[str, Any]
    inputs: tuple[dict[str, Any], ...]
    run: dict[str, Any]
    seed: int = 0
    task: dict[str, Any] | None = None

    def finished_run(self, bytes_read: int | None = None) -> dict[str, Any]:
        """The ``run`` entry at the end of the run: with its seconds since ``started_at``, and its input
        MB/s when ``bytes_read`` is given."""
        run = dict(self.run)
        started = run.get("started_at")
        if started:
            run["seconds"] = round(time.time() - started, 3)
            if bytes_read is not None:  # the input's MB as listed (a .gz's compressed bytes), as the run's lines say
                per_s = run.get("input_bytes", bytes_read) / 1e6 / max(run["seconds"], 1e-9)
                run["input_mb_per_s"] = round(per_s, 3)
        return run

    def manifest(
        self,
        *,
        kind: str,
        shards: tuple[ShardInfo, ...],
        totals: dict[str, Any],
        counters: dict[str, int],
        statistics: dict[str, Any],
        task: dict[str, Any] | None = None,
        bytes_read: int | None = None,
    ) -> Manifest:
        """The finished dataset's manifest: this header with what the finalize stage found (``task``: the
        task entry's run-time part, merged over the header's)."""
        return Manifest(
            kind=kind,
            vocab=self.vocab,
            parameters=self.parameters,
            seed=self.seed,
            shards=shards,
            inputs=self.inputs,
            totals=totals,
            counters=counters,
            statistics=statistics,
            task={**(self.task or {}), **(task or {})},
            run=self.finished_run(bytes_read),
        )


def unpublish(output_dir: str, manifest: Manifest) -> None:
    """Remove a finished run's manifest (first: no manifest, no dataset), the files it lists and its vocabulary."""
    literal.delete([FileSystems.join(output_dir, MANIFEST_NAME)])
    names = [s.path for s in manifest.shards] + [f["path"] for f in (manifest.task or {}).get("files", [])]
    paths = [FileSystems.join(output_dir, n) for n in [*names, VOCAB_FILENAME]]
    literal.delete([p for p in paths if FileSystems.exists(p)])


@dataclass(frozen=True, slots=True)
class RunResult:
    manifest: Manifest
    output_dir: str
    seconds: float
    input_bytes: int


def read_result(output_dir: str, started: float, input_bytes: int) -> RunResult:
    """The published manifest of a finished run, and how long the run took since ``started``."""
    seconds = time.time() - started
    manifest = Manifest.from_json(read_whole(FileSystems.join(output_dir, MANIFEST_NAME), "the manifest"))
    return RunResult(manifest=manifest, output_dir=output_dir, seconds=seconds, input_bytes=input_bytes)


def load_manifest(dataset_dir: str) -> Manifest:
    with served(dataset_dir, "the dataset"):
        path = FileSystems.join(dataset_dir, MANIFEST_NAME)
        present = FileSystems.exists(path)
    if not present:
        raise FileNotFoundError(f"{dataset_dir}: no {MANIFEST_NAME} (not a finished bertstream dataset)")
    return Manifest.from_json(read_whole(path, "the manifest"), source=path)


def write_text_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with FileSystems.create(tmp) as f:
        f.write(text.encode("utf-8"))
    FileSystems.rename([tmp], [path])
