"""What every pipeline run does around its Beam graph (pretraining and tasks): size the shard count, prepare
the ``--output`` folder, write the manifest entries both kinds share, read the published manifest back.

Each side keeps its own policy (which files are a dataset's, how much input a shard takes); the steps are here.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import check
from bertstream.pipelines.common.output_dir import ensure_writable_dir, foreign_files, refusal, refuse_foreign
from bertstream.pipelines.common.redact import redact_options, redact_text
from bertstream.pipelines.common.runner import UsageError, runner_name
from bertstream.pipelines.common.tokenizer import TokenizerSpec
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo
from bertstream.schemas.manifest import vocab_entry as schema_vocab_entry
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


def existing_outputs(output_dir: str, is_output: Callable[[str], bool]) -> list[str]:
    """The files directly in ``output_dir`` whose base name ``is_output`` says belongs to a dataset, sorted."""
    found = []
    for r in FileSystems.match([FileSystems.join(output_dir, "*")]):
        for m in r.metadata_list:
            if is_output(m.path.rstrip("/").rsplit("/", 1)[-1]):
                found.append(m.path)
    return sorted(found)


def _names_in(output_dir: str) -> list[str]:
    """Every name directly in ``output_dir`` (files and folders; on object stores, the objects below it)."""
    if "://" not in output_dir:
        return sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
    names = set()
    prefix = output_dir.rstrip("/") + "/"
    for r in FileSystems.match([prefix + "*"]):
        for m in r.metadata_list:
            names.add(m.path[len(prefix) :].split("/", 1)[0] if m.path.startswith(prefix) else m.path)
    return sorted(n for n in names if n)


def _manifest_kind(output_dir: str) -> str | None:
    """The ``kind`` of the manifest in ``output_dir`` (None: no manifest, or one that cannot be read)."""
    try:
        with FileSystems.open(FileSystems.join(output_dir, MANIFEST_NAME), compression_type="uncompressed") as f:
            kind = json.loads(f.read()).get("kind")
    except Exception:  # noqa: BLE001 - an unreadable manifest is a killed run's leftover
        return None
    return kind if isinstance(kind, str) else None


def check_output(
    output_dir: str,
    overwrite: bool,
    is_output: Callable[[str], bool],
    kinds: tuple[str, ...] = (),
    what: str = "a dataset's",
) -> list[str]:
    """Refuse to mix runs: a folder holding anything but this command's files (``is_output``; a dataset of
    another ``kind`` than ``kinds``) is refused, with or without ``overwrite``; one holding this command's
    dataset files (a vocabulary alone does not count) needs ``overwrite``. Returns the files the run
    replaces, the manifest first. Changes nothing; call it holding the lock."""
    ensure_writable_dir(output_dir)
    kind = _manifest_kind(output_dir)
    if kinds and kind is not None and kind not in kinds:
        raise UsageError(
            "output",
            f"{output_dir} holds a {kind} dataset, which this command does not write: choose another --output",
        )
    own = lambda name: is_output(name) or name == VOCAB_FILENAME  # noqa: E731 - every dataset has a vocab.txt
    refuse_foreign(output_dir, foreign_files(output_dir, own, _names_in(output_dir)), what)
    existing = existing_outputs(output_dir, is_output)
    if any(not p.endswith(VOCAB_FILENAME) for p in existing) and not overwrite:
        raise UsageError("output", refusal(output_dir, existing))
    manifest = FileSystems.join(output_dir, MANIFEST_NAME)
    paths = [manifest] if FileSystems.exists(manifest) else []
    paths += [p for p in existing if p != manifest]
    vocab = FileSystems.join(output_dir, VOCAB_FILENAME)
    if not any(q.endswith(VOCAB_FILENAME) for q in paths) and FileSystems.exists(vocab):
        paths.append(vocab)
    return paths


def prepare_output(
    output_dir: str,
    overwrite: bool,
    is_output: Callable[[str], bool],
    kinds: tuple[str, ...] = (),
    what: str = "a dataset's",
) -> None:
    """:func:`check_output`, then delete what it returns, the old manifest first (so a crash leaves none)."""
    for p in check_output(output_dir, overwrite, is_output, kinds, what):
        FileSystems.delete([p])


@contextmanager
def replacing(output_dir: str, is_output: Callable[[str], bool], paths: list[str], aside_dir: str) -> Iterator[None]:
    """Run the block with the earlier run's files (``paths``, from :func:`check_output`) set aside in
    ``aside_dir``, manifest first; if the block fails, its own files go and the earlier run comes back (its
    manifest last), so that ``--overwrite`` loses nothing to a run that fails, even one that fails late
    (a corrupt file found while reading). On success the caller removes ``aside_dir`` with its work folder."""
    moved: list[tuple[str, str]] = []
    if paths and "://" not in aside_dir:
        os.makedirs(aside_dir, exist_ok=True)
    try:
        for p in paths:
            dst = FileSystems.join(aside_dir, p.rstrip("/").rsplit("/", 1)[-1])
            FileSystems.rename([p], [dst])
            moved.append((p, dst))
        yield
    except BaseException:
        _restore(output_dir, is_output, moved, aside_dir)
        raise


def _restore(output_dir: str, is_output: Callable[[str], bool], moved: list[tuple[str, str]], aside: str) -> None:
    if not moved:
        return
    try:
        partial = existing_outputs(output_dir, is_output)
        if partial:
            FileSystems.delete(partial)
        for src, dst in sorted(moved, key=lambda m: m[0].endswith(MANIFEST_NAME)):
            FileSystems.rename([dst], [src])
    except Exception as e:  # noqa: BLE001 - the run's own error is what the user must see
        from bertstream.pipelines.common import counters as C

        C.progress(f"could not put the earlier dataset back ({type(e).__name__}: {e}); its files are in {aside}")


def vocab_entry(spec: TokenizerSpec) -> dict[str, Any]:
    """The manifest's ``vocab`` (``bertstream.schemas.manifest.vocab_entry``: what the trainer checks its tokenizer
    against) for a run's tokenizer, its source redacted."""
    return schema_vocab_entry(spec.vocab, lowercase=spec.lowercase, source=redact_text(spec.source))


def run_entry(options: Any, beam_args: list[str], started: float) -> dict[str, Any]:
    """The manifest's ``run``: the runner, its options with secrets redacted, the start time."""
    return {"runner": runner_name(options), "options": redact_options(list(beam_args)), "started_at": started}


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
            if bytes_read is not None:
                run["input_mb_per_s"] = round(bytes_read / 1e6 / max(run["seconds"], 1e-9), 3)
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


def load_manifest(dataset_dir: str) -> Manifest:
    path = FileSystems.join(dataset_dir, MANIFEST_NAME)
    if not FileSystems.exists(path):
        raise FileNotFoundError(f"{dataset_dir}: no {MANIFEST_NAME} (not a finished bertstream dataset)")
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return Manifest.from_json(f.read(), source=path)


def write_text_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with FileSystems.create(tmp) as f:
        f.write(text.encode("utf-8"))
    FileSystems.rename([tmp], [path])
