"""``bertprep extract``: the documents that any input format yields, after reading and cleaning and before
segmentation, written as JSON lines: what replaces WikiExtractor for users who want text only, and what shows
what the pipeline reads.

Each line is ``{"id", "title", "text"}``: the id the source gives the document (a dump's page id, a record's
``id``) or else the pipeline's own (``name:offset``), the title where the format has one (else ``""``), and the
paragraphs joined by ``\\n`` (reading the file back as ``jsonl:`` gives the same paragraphs). Documents without
text are counted drops (``empty``), as the pretraining pipeline counts them.

The run is a dataset run like every other (:func:`bertstream.pipelines.common.dataset_run.run_dataset`): the
``--output`` policy, a ``manifest.json`` (kind ``documents``) with the counters, inputs and files, published
last. Read -> ToLines (a document to a file chosen by a stable hash of its id) -> WriteFiles (a file's lines in
the order of their ids: input name, then offset, page id or row) -> Finalize. Neither the files nor their order
depend on the runner or the worker count. A file's lines are sorted in memory on one worker: a file holds
about :data:`SHARD_SIZING`'s bytes of input.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.dataset_run import (
    DatasetHeader,
    DatasetRun,
    RunResult,
    ShardSizing,
    run_dataset,
    write_text_atomic,
)
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.inputs import describe_inputs, input_format_of, resolve_inputs
from bertstream.pipelines.common.output_dir import Claim, OutputPolicy
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.extract_config import ExtractConfig, ExtractJob
from bertstream.pipelines.pretraining.documents import Document, DocumentBatch
from bertstream.pipelines.pretraining.read import ReadDocuments, range_bytes_for
from bertstream.pipelines.runners.runner import pipeline_options
from bertstream.schemas.hashing import hash64
from bertstream.schemas.manifest import DOCUMENTS_KIND, MANIFEST_NAME, ShardInfo

SHARD_PREFIX = "documents"
# Input per output file: a compressed dump holds 3-4x its size of XML, about half of it text.
SHARD_SIZING = ShardSizing(bytes_per_shard=32 << 20)
LINES_WRITTEN = "lines_written"

OrderKey = tuple[str, int, str]


def _is_output(name: str) -> bool:
    return name.startswith((MANIFEST_NAME, f"{SHARD_PREFIX}-"))


POLICY = OutputPolicy("bertprep extract", _is_output, kinds=(DOCUMENTS_KIND,), what="extracted documents'")


def document_record(doc: Document) -> dict[str, str]:
    """The JSON object of one document."""
    return {"id": doc.source_id or doc.doc_id, "title": doc.title, "text": "\n".join(doc.paragraphs)}


def order_key(doc_id: str) -> OrderKey:
    """Where a document stands in its file's output: its input's name, then the number its id ends in (offset,
    page id or row: file order), then the rest; the same on any worker."""
    name, sep, tail = doc_id.rpartition(":")
    if not sep:
        return doc_id, -1, ""
    return (name, int(tail), "") if tail.isdigit() else (name, -1, tail)


def shard_of(doc_id: str, num_shards: int) -> int:
    return hash64("extract", doc_id) % num_shards


def shard_name(index: int, num_shards: int, gzipped: bool) -> str:
    return f"{SHARD_PREFIX}-{index:05d}-of-{num_shards:05d}.jsonl" + (".gz" if gzipped else "")


def batch_lines(batch: DocumentBatch, num_shards: int) -> Iterator[tuple[int, tuple[OrderKey, str]]]:
    """``(file, (order, JSON line))`` for each document with text."""
    for doc in batch.documents:
        if doc.paragraphs:
            line = json.dumps(document_record(doc), ensure_ascii=False)
            yield shard_of(doc.doc_id, num_shards), (order_key(doc.doc_id), line)


def batch_counters(batch: DocumentBatch) -> dict[str, int]:
    """The read stage's counters of a batch, with its documents used and those without text dropped."""
    counters = Counter(batch.counters)
    empty = sum(1 for d in batch.documents if not d.paragraphs)
    counters[C.DOCUMENTS_USED] += len(batch.documents) - empty
    if empty:
        counters[C.drop(C.EMPTY)] += empty
    return dict(counters)


def file_bytes(lines: Iterable[tuple[OrderKey, str]], gzipped: bool) -> tuple[bytes, int]:
    """One file's bytes (its lines in order; gzip without a time stamp, so equal runs write equal bytes) and its
    number of lines."""
    ordered = [line for _, line in sorted(lines)]
    data = "".join(line + "\n" for line in ordered).encode("utf-8")
    return (gzip.compress(data, compresslevel=6, mtime=0) if gzipped else data), len(ordered)


@dataclass(frozen=True, slots=True)
class ExtractSpec:
    """Where the files go, how many, whether gzipped; the manifest's header."""

    output_dir: str
    num_shards: int
    gzip: bool
    header: DatasetHeader


def write_file(spec: ExtractSpec, index: int, lines: Iterable[tuple[OrderKey, str]]) -> dict[str, Any]:
    """Write file ``index`` (under a temporary name, then renamed): its manifest entry."""
    data, count = file_bytes(lines, spec.gzip)
    name = shard_name(index, spec.num_shards, spec.gzip)
    path = FileSystems.join(spec.output_dir, name)
    with FileSystems.create(path + ".tmp", compression_type="uncompressed") as f:
        f.write(data)
    FileSystems.rename([path + ".tmp"], [path])
    info = ShardInfo(path=name, format="jsonl", count=count, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    return {"shard": index, "file": info}


def finalize(spec: ExtractSpec, results: list[dict[str, Any]], counters: dict[str, int]) -> str:
    """Write the files that got no document (empty), check the counters, publish the manifest; its text."""
    done = {r["shard"] for r in results}
    results = list(results) + [write_file(spec, i, []) for i in range(spec.num_shards) if i not in done]
    shards = tuple(r["file"] for r in sorted(results, key=lambda r: r["shard"]))
    counters = dict(sorted(counters.items()))
    read, used, drops = counters.get(C.DOCUMENTS_READ, 0), counters.get(C.DOCUMENTS_USED, 0), C.dropped(counters)
    if read != used + sum(drops.values()):
        raise RuntimeError(f"counters do not reconcile: documents read {read} != used {used} + dropped {drops}")
    written = sum(s.count for s in shards)
    if written != used:  # a runner that loses elements must fail the run, not publish less
        raise RuntimeError(f"documents lost before the files: {used} used, {written} written")
    counters[LINES_WRITTEN] = written
    totals = {"documents": written, "bytes": {"jsonl": sum(s.bytes for s in shards)}}
    manifest = spec.header.manifest(
        kind=DOCUMENTS_KIND,
        shards=shards,
        totals=totals,
        counters=counters,
        statistics={},
        bytes_read=counters.get(C.BYTES_READ, 0),
    )
    text = manifest.to_json()
    write_text_atomic(FileSystems.join(spec.output_dir, MANIFEST_NAME), text)
    return text


class _WriteFileFn(beam.DoFn):
    def __init__(self, spec: ExtractSpec) -> None:
        self.spec = spec

    def process(self, element: tuple[int, Iterable[tuple[OrderKey, str]]]) -> Iterator[dict[str, Any]]:
        index, lines = element
        yield write_file(self.spec, index, lines)


class WriteDocuments(beam.PTransform):
    """``PCollection[DocumentBatch]`` -> the ``documents-*`` files and ``manifest.json``; yields the manifest's
    text."""

    def __init__(self, spec: ExtractSpec) -> None:
        super().__init__()
        self.spec = spec

    def expand(self, docs):
        spec = self.spec
        counters = docs | "Counters" >> beam.Map(batch_counters) | "MergeCounters" >> beam.CombineGlobally(C.merge)
        results = (
            docs
            | "ToLines" >> beam.FlatMap(batch_lines, spec.num_shards)
            | "ByFile" >> beam.GroupByKey()
            | "WriteFiles" >> beam.ParDo(_WriteFileFn(spec))
            | "ListFiles" >> beam.combiners.ToList()
        )
        write = functools.partial(finalize, spec)  # (results, counters) -> the manifest
        return results | "WriteManifest" >> beam.Map(write, beam.pvalue.AsSingleton(counters))


def run_extract(job: ExtractJob) -> RunResult:
    """Validate, build and run ``bertprep extract``; return its manifest. Raises before Beam starts on bad
    input."""
    cfg, beam_args = job.config, list(job.beam_args)
    options = pipeline_options(beam_args)
    files = resolve_inputs(list(job.inputs), cfg.input_format)
    formats = input_format_of(files)
    if isinstance(formats, str) and formats != cfg.input_format:
        cfg = replace(cfg, input_format=formats)
    input_bytes = sum(f.bytes for f in files)
    if not input_bytes:
        raise UsageError("input", f"{describe_inputs(files)}: empty (0 bytes), no documents to extract")
    num_shards = cfg.num_shards or SHARD_SIZING.num_shards(input_bytes)

    def header(claim: Claim, run: dict) -> DatasetHeader:
        return DatasetHeader(
            vocab={},
            parameters={**_parameters(cfg), "input_format": formats, "num_shards": num_shards},
            inputs=tuple({"path": redact_text(f.path), "bytes": f.bytes, "format": f.format} for f in files),
            run=run,
        )

    def build(p: beam.Pipeline, claim: Claim, head: DatasetHeader) -> None:
        spec = ExtractSpec(output_dir=claim.output_dir, num_shards=num_shards, gzip=cfg.gzip, header=head)
        inputs = p | "Inputs" >> beam.Create([(f.path, f.format, f.name or f.path, f.bytes, f.mtime) for f in files])
        docs = inputs | "Read" >> ReadDocuments(cfg.strip_gutenberg, range_bytes_for(input_bytes), cfg.text_field)
        _ = docs | "Write" >> WriteDocuments(spec)

    def check(result: RunResult) -> None:
        if not result.manifest.totals.get("documents"):
            c = result.manifest.counters
            raise InputError(
                f"--input {describe_inputs(files)}: no documents with text ({c.get(C.DOCUMENTS_READ, 0)} read, "
                f"dropped: {C.dropped(c) or 'none'})"
            )

    return run_dataset(
        DatasetRun(
            policy=POLICY,
            output=job.output,
            overwrite=job.overwrite,
            reads={"input": [f.path for f in files]},
            options=options,
            beam_args=tuple(beam_args),
            input_bytes=input_bytes,
            header=header,
            build=build,
            announce=lambda claim: (
                f"{len(files)} input files, {input_bytes / 1e6:.1f} MB -> {claim.output_dir} ({num_shards} files)"
            ),
            check=check,
        )
    )


def _parameters(cfg: ExtractConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in cfg.__slots__}
