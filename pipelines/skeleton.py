"""What every pipeline run does around its Beam graph (pretraining and tasks): size the shard count, prepare
the ``--output`` folder, write the manifest entries both kinds share, read the published manifest back.

Each side keeps its own policy (which files are a dataset's, how much input a shard takes); the steps are here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apache_beam.io.filesystems import FileSystems

from pipelines.config import check
from pipelines.output_dir import ensure_writable_dir, refusal
from pipelines.redact import redact_options
from pipelines.runner import UsageError, runner_name
from pipelines.tokenize import TokenizerSpec
from schemas.manifest import MANIFEST_NAME, Manifest
from schemas.vocab import VOCAB_FILENAME


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


def existing_outputs(output_dir: str, is_output: Callable[[str], bool]) -> list[str]:
    """The files directly in ``output_dir`` whose base name ``is_output`` says belongs to a dataset, sorted."""
    found = []
    for r in FileSystems.match([FileSystems.join(output_dir, "*")]):
        for m in r.metadata_list:
            if is_output(m.path.rstrip("/").rsplit("/", 1)[-1]):
                found.append(m.path)
    return sorted(found)


def prepare_output(output_dir: str, overwrite: bool, is_output: Callable[[str], bool]) -> None:
    """Refuse to mix runs: a folder holding a dataset's files (a vocabulary alone does not count) needs
    ``overwrite``, which removes the old manifest first (so a crash leaves none), then the other files and
    the vocabulary."""
    ensure_writable_dir(output_dir)
    existing = existing_outputs(output_dir, is_output)
    if any(not p.endswith(VOCAB_FILENAME) for p in existing) and not overwrite:
        raise UsageError("output", refusal(output_dir, existing))
    manifest = FileSystems.join(output_dir, MANIFEST_NAME)
    if FileSystems.exists(manifest):
        FileSystems.delete([manifest])
    others = [p for p in existing if p != manifest]
    vocab = FileSystems.join(output_dir, VOCAB_FILENAME)
    if not any(q.endswith(VOCAB_FILENAME) for q in others) and FileSystems.exists(vocab):
        others.append(vocab)
    if others:
        FileSystems.delete(others)


def vocab_entry(spec: TokenizerSpec) -> dict[str, Any]:
    """The manifest's ``vocab``: what the trainer checks its tokenizer against."""
    return {
        "sha256": spec.vocab.sha256,
        "size": len(spec.vocab),
        "file": VOCAB_FILENAME,
        "lowercase": spec.lowercase,
        "id_type": spec.vocab.id_type,
        "special_ids": spec.vocab.special_ids,
        "source": spec.source,
    }


def run_entry(options: Any, beam_args: list[str], started: float) -> dict[str, Any]:
    """The manifest's ``run``: the runner, its options with secrets redacted, the start time."""
    return {"runner": runner_name(options), "options": redact_options(list(beam_args)), "started_at": started}


@dataclass(frozen=True, slots=True)
class RunResult:
    manifest: Manifest
    output_dir: str
    seconds: float
    input_bytes: int


def read_result(output_dir: str, started: float, input_bytes: int) -> RunResult:
    """The published manifest of a finished run, and how long the run took since ``started``."""
    seconds = time.time() - started
    with FileSystems.open(FileSystems.join(output_dir, MANIFEST_NAME), compression_type="uncompressed") as f:
        manifest = Manifest.from_json(f.read())
    return RunResult(manifest=manifest, output_dir=output_dir, seconds=seconds, input_bytes=input_bytes)
