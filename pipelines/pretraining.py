"""The pretraining pipeline: text files -> masked NSP instances -> shards + manifest.

``run_pretraining`` validates everything that can be validated before Beam starts (inputs, vocabulary,
output directory, runner options), builds the pipeline from the stage composites, runs it, and returns the
manifest. Read -> Segment -> Tokenize -> Group -> CreateInstances -> Mask -> ShuffleAndWrite -> Finalize.
"""

from __future__ import annotations

import glob
import math
import os
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import FileSystems

from pipelines import counters as C
from pipelines.config import FORMATS, PretrainingConfig
from pipelines.finalize import Finalize
from pipelines.group import GroupDocuments
from pipelines.instances import CreateInstances
from pipelines.masking import MaskInstances
from pipelines.output_dir import ensure_writable_dir, refusal
from pipelines.read import InputError, ReadDocuments, range_bytes_for
from pipelines.redact import redact_options
from pipelines.runner import UsageError, local_threads_per_worker, make_pipeline, pipeline_options, runner_name
from pipelines.sentences import SegmentDocuments
from pipelines.source_stats import UnkWords
from pipelines.spill import remove_work_dir, spill_bytes_for
from pipelines.tokenize import Tokenize, TokenizerSpec, load_tokenizer
from pipelines.write import SHARD_PREFIX, WriteShards, shard_writers
from schemas.manifest import MANIFEST_NAME, Manifest
from schemas.vocab import CLS, SEP, VOCAB_FILENAME

WORK_DIR_NAME = "_work"
# Bytes the instance shuffle spills per input byte and dupe pass (measured: 0.73 at length 128, 30k vocab).
INSTANCE_SPILL_PER_BYTE = 0.75
# Input text per shard and pass: about 150,000 instances at length 128, 35 MB of Arrow. It also bounds the
# shard writer's memory (a shard is sorted in memory), whatever the corpus size.
TARGET_SHARD_INPUT_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class InputFile:
    path: str
    bytes: int
    format: str
    name: str = ""  # the path below the common folder of all inputs: what document ids are made of


def relative_names(paths: list[str]) -> list[str]:
    """Each path below the deepest folder that holds all of them (``/data/wiki/AA/wiki_00`` and
    ``/data/books/a.txt`` -> ``wiki/AA/wiki_00``, ``books/a.txt``; one file -> its base name).

    Document ids are ``name:offset``, so the same corpus gives the same shards wherever it lives: another
    directory, another machine, a bucket instead of a disk.
    """
    parts = [p.split("/") for p in paths]
    common = 0
    if parts:
        folders = [q[:-1] for q in parts]
        while all(len(f) > common and f[common] == folders[0][common] for f in folders):
            common += 1
    return ["/".join(q[common:]) for q in parts]


def absolute(path: str) -> str:
    """A local path made absolute (URLs as they are): workers of a distributed runner would resolve a relative
    path against their own working directory, not the launcher's."""
    return path if "://" in path else os.path.abspath(path)


def split_format(pattern: str, default_format: str) -> tuple[str, str]:
    """``"text:books/*.txt"`` -> ``("text", "books/*.txt")``; no known prefix -> the default format."""
    head, sep, rest = pattern.partition(":")
    if sep and head in FORMATS:
        return head, rest
    return default_format, pattern


def match_pattern(pattern: str) -> list[FileMetadata]:
    """Files matching a path or glob. Local patterns are made absolute and matched by Python's ``glob``
    (recursive ``**``, symbolic links followed): Beam's local match finds nothing for a relative pattern
    with a wildcard in a folder (``corpus*/wiki/*``) and does not descend into linked folders."""
    if "://" in pattern:
        return [m for m in FileSystems.match([pattern])[0].metadata_list if not m.path.endswith("/")]
    pattern = absolute(os.path.expanduser(pattern))
    paths = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
    return [FileMetadata(p, os.path.getsize(p), os.path.getmtime(p)) for p in paths if os.path.isfile(p)]


def resolve_inputs(patterns: list[str], default_format: str = "sentences") -> list[InputFile]:
    """Expand paths and globs on any Beam filesystem; a pattern that matches nothing is an error.

    A pattern may carry its own format (``wikiextractor:wiki/*``), so books and Wikipedia can share one
    run and one random-next pool, as in BERT's own pretraining data.
    """
    if not patterns:
        raise UsageError("input", "no --input given")
    found: dict[str, tuple[int, str]] = {}
    for raw in patterns:
        fmt, pattern = split_format(raw, default_format)
        try:
            files = match_pattern(pattern)
        except Exception as e:
            raise UsageError("input", f"cannot list {pattern!r}: {e}") from None
        if not files:
            raise UsageError("input", f"{pattern!r} matches no files")
        for m in files:
            if m.path in found and found[m.path][1] != fmt:
                raise UsageError("input", f"{m.path} is given as both {found[m.path][1]} and {fmt}")
            found[m.path] = (m.size_in_bytes, fmt)
    # Sorted: the order of --input arguments must not matter.
    paths = sorted(found)
    return [InputFile(p, *found[p], name=n) for p, n in zip(paths, relative_names(paths))]


def input_format_of(files: list[InputFile]) -> str | dict[str, str]:
    """The runs's input format: one name, or each input's own (``{"books/a.txt": "text", ...}``) when they mix."""
    formats = {f.format for f in files}
    if len(formats) == 1:
        return formats.pop()
    return {f.name or f.path: f.format for f in files}


def describe_inputs(files: list[InputFile], shown: int = 3) -> str:
    """``a.txt, b.txt and 4 more``: how an error names the inputs."""
    names = ", ".join(f.path for f in files[:shown])
    return names + (f" and {len(files) - shown} more" if len(files) > shown else "")


def unpublish(output_dir: str, manifest: Manifest) -> None:
    """Remove a finished run's manifest (first: no manifest, no dataset), shards and vocabulary."""
    FileSystems.delete([FileSystems.join(output_dir, MANIFEST_NAME)])
    paths = [FileSystems.join(output_dir, s.path) for s in manifest.shards]
    paths.append(FileSystems.join(output_dir, VOCAB_FILENAME))
    FileSystems.delete([p for p in paths if FileSystems.exists(p)])


def auto_num_shards(input_bytes: int, dupe_factor: int) -> int:
    """About 64 MB of input text per shard and pass (roughly 35 MB of Arrow), at least 4 shards."""
    return max(4, math.ceil(input_bytes * dupe_factor / TARGET_SHARD_INPUT_BYTES))


def existing_outputs(output_dir: str) -> list[str]:
    patterns = [FileSystems.join(output_dir, f"{MANIFEST_NAME}*"), FileSystems.join(output_dir, f"{SHARD_PREFIX}-*")]
    found = []
    for r in FileSystems.match(patterns):
        found.extend(m.path for m in r.metadata_list)
    return sorted(found)


def prepare_output(output_dir: str, overwrite: bool) -> str:
    """Refuse to mix runs; with ``overwrite``, remove the old manifest first (so a crash leaves none)."""
    existing = existing_outputs(output_dir)
    if existing and not overwrite:
        raise UsageError("output", refusal(output_dir, existing))
    manifest = FileSystems.join(output_dir, MANIFEST_NAME)
    if FileSystems.exists(manifest):
        FileSystems.delete([manifest])
    others = [p for p in existing if p != manifest]
    vocab = FileSystems.join(output_dir, VOCAB_FILENAME)
    if FileSystems.exists(vocab):
        others.append(vocab)
    if others:
        FileSystems.delete(others)
    work_dir = FileSystems.join(output_dir, WORK_DIR_NAME)
    remove_work_dir(work_dir)  # leftovers of a killed run
    if "://" not in work_dir:  # object stores have no directories
        FileSystems.mkdirs(work_dir)
    return work_dir


def build_pipeline(
    p: beam.Pipeline,
    inputs: list[InputFile],
    cfg: PretrainingConfig,
    spec: TokenizerSpec,
    output_dir: str,
    work_dir: str,
    num_shards: int,
    base: dict[str, Any],
    tokenizer_threads: int = 1,
) -> None:
    vocab = spec.vocab
    writer_args = dict(
        id_type=vocab.id_type,
        vocab_sha256=vocab.sha256,
        parameters={**cfg.shard_parameters(), "input_format": input_format_of(inputs)},
        compression=cfg.arrow_compression,
        batch_rows=cfg.arrow_batch_rows,
    )
    stats_args = dict(
        mask_id=vocab.id("[MASK]"),
        max_seq_length=cfg.max_seq_length,
        max_predictions=cfg.max_predictions_per_seq,
        masked_lm_prob=cfg.masked_lm_prob,
        whole_word=cfg.whole_word_mask,
    )
    files = p | "Inputs" >> beam.Create([(f.path, f.format, f.name or f.path, f.bytes) for f in inputs])
    input_bytes = sum(f.bytes for f in inputs)
    range_bytes = range_bytes_for(input_bytes)  # big files are read by many workers
    docs = files | "Read" >> ReadDocuments(cfg.strip_gutenberg, range_bytes)
    sentences = docs | "Segment" >> SegmentDocuments()
    tokenized = sentences | "Tokenize" >> Tokenize(spec, tokenizer_threads)
    units, groups = tokenized | "Group" >> GroupDocuments(
        seed=cfg.seed,
        docs_per_group=cfg.docs_per_group,
        max_group_tokens=cfg.max_group_tokens,
        dupe_factor=cfg.dupe_factor,
        tokens_per_unit=cfg.tokens_per_unit,
        work_dir=work_dir,
    )
    raw = units | "CreateInstances" >> CreateInstances(
        max_num_tokens=cfg.max_num_tokens, short_seq_prob=cfg.short_seq_prob, cls_id=vocab.id(CLS), sep_id=vocab.id(SEP)
    )
    masked = raw | "Mask" >> MaskInstances(
        vocab,
        masked_lm_prob=cfg.masked_lm_prob,
        max_predictions=cfg.max_predictions_per_seq,
        whole_word=cfg.whole_word_mask,
    )
    results = masked | "ShuffleAndWrite" >> WriteShards(
        output_dir,
        work_dir,
        num_shards,
        cfg.seed,
        cfg.formats,
        writer_args=writer_args,
        stats_args=stats_args,
        spill_bytes=spill_bytes_for(int(input_bytes * cfg.dupe_factor * INSTANCE_SPILL_PER_BYTE)),
    )
    counters = (
        tokenized | "Counters" >> beam.Map(lambda b: dict(b.counters)),
        # Counted where instances are made, checked against the shards: a runner that loses elements fails.
        raw | "CountInstances" >> beam.Map(lambda b: {C.INSTANCES_CREATED: len(b)}),
    ) | "AllCounters" >> beam.Flatten()
    make_writers = partial(_writers_for_shard, output_dir, num_shards, cfg.formats, writer_args)
    _ = results | "Finalize" >> Finalize(
        output_dir=output_dir,
        work_dir=work_dir,
        base=base,
        vocab_text=vocab.text(),
        num_shards=num_shards,
        make_writers=make_writers,
        max_seq_length=cfg.max_seq_length,
        id_type=vocab.id_type,
        counters=counters,
        groups=groups,
        unk_words=tokenized | "UnkWords" >> UnkWords(),
    )


def _writers_for_shard(
    output_dir: str, num_shards: int, formats: tuple[str, ...], writer_args: dict[str, Any], shard: int
) -> list:
    return shard_writers(output_dir, shard, num_shards, formats, **writer_args)


@dataclass(frozen=True, slots=True)
class RunResult:
    manifest: Manifest
    output_dir: str
    seconds: float
    input_bytes: int


# Cleaning up after a failed run must not hide or delay its error: on an object store that has gone away,
# Beam's S3/GCS clients retry each list and delete with exponential backoff for about ten minutes.
CLEANUP_SECONDS = 30.0


def remove_work_dir_within(work_dir: str, seconds: float | None = None) -> bool:
    """``remove_work_dir`` in a daemon thread, waited for at most ``seconds``; a failure or a timeout is
    reported as a leftover, never raised (the caller is already raising the run's own error)."""
    seconds = CLEANUP_SECONDS if seconds is None else seconds
    outcome: dict[str, BaseException | None] = {}

    def target() -> None:
        try:
            remove_work_dir(work_dir)
            outcome["error"] = None
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome["error"] = e

    t = threading.Thread(target=target, name="bertprep-cleanup", daemon=True)
    t.start()
    t.join(seconds)
    if "error" in outcome and outcome["error"] is None:
        return True
    error = outcome.get("error")
    why = f"not done after {seconds:g} s" if "error" not in outcome else f"{type(error).__name__}: {error}"
    C.progress(f"could not remove the work directory {work_dir} ({why}): leftovers of this failed run, safe to delete")
    return False


def run_pretraining(
    *,
    inputs: list[str],
    vocab: str,
    output_dir: str,
    cfg: PretrainingConfig,
    beam_args: list[str] | None = None,
    overwrite: bool = False,
    lowercase: bool | None = None,
) -> RunResult:
    """Validate, build and run the pipeline; return its manifest. Raises before Beam starts on bad input."""
    options = pipeline_options(list(beam_args or []))
    files = resolve_inputs(inputs, cfg.input_format)
    formats = input_format_of(files)
    if isinstance(formats, str) and formats != cfg.input_format:  # all given as `text:...`, say
        cfg = replace(cfg, input_format=formats)
    spec = load_tokenizer(vocab, lowercase)
    if spec.lowercase != cfg.lowercase:
        cfg = replace(cfg, lowercase=spec.lowercase)
    input_bytes = sum(f.bytes for f in files)
    if not input_bytes:
        raise UsageError("input", f"{describe_inputs(files)}: empty (0 bytes), nothing to make instances from")
    num_shards = cfg.num_shards or auto_num_shards(input_bytes, cfg.dupe_factor)
    output_dir = absolute(output_dir.rstrip("/"))
    ensure_writable_dir(output_dir)
    work_dir = prepare_output(output_dir, overwrite)
    started = time.time()
    base = {
        "vocab": {
            "sha256": spec.vocab.sha256,
            "size": len(spec.vocab),
            "file": VOCAB_FILENAME,
            "lowercase": spec.lowercase,
            "id_type": spec.vocab.id_type,
            "special_ids": spec.vocab.special_ids,
            "source": spec.source,
        },
        "parameters": {**cfg.to_dict(), "input_format": formats, "num_shards": num_shards},
        "seed": cfg.seed,
        "inputs": [{"path": f.path, "bytes": f.bytes, "format": f.format} for f in files],
        "run": {
            "runner": runner_name(options),
            "options": redact_options(list(beam_args or [])),
            "started_at": started,
        },
    }
    C.progress(f"{len(files)} input files, {input_bytes / 1e6:.1f} MB -> {output_dir} ({num_shards} shards)")
    try:
        p = make_pipeline(options)
        build_pipeline(p, files, cfg, spec, output_dir, work_dir, num_shards, base, local_threads_per_worker(options))
        p.run().wait_until_finish()
    except BaseException:
        remove_work_dir_within(work_dir)  # spill and pool files of a failed run; shards were never published
        raise
    seconds = time.time() - started
    with FileSystems.open(FileSystems.join(output_dir, MANIFEST_NAME), compression_type="uncompressed") as f:
        manifest = Manifest.from_json(f.read())
    if not manifest.totals.get("instances"):
        unpublish(output_dir, manifest)
        c = manifest.counters
        raise InputError(
            f"--input {describe_inputs(files)}: no instances ({c.get(C.DOCUMENTS_READ, 0)} documents read, "
            f"{c.get(C.DOCUMENTS_USED, 0)} used, {c.get(C.TOKENS, 0)} tokens)"
        )
    return RunResult(manifest=manifest, output_dir=output_dir, seconds=seconds, input_bytes=input_bytes)
