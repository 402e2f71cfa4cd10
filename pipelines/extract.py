"""``bertprep extract``: the documents that any input format yields, after reading and cleaning and before
segmentation, written as JSON lines: what replaces WikiExtractor for users who want text only, and what shows
what the pipeline reads.

Each line is ``{"id", "title", "text"}``: the id the source gives the document (a dump's page id, a record's
``id``) or else the pipeline's own (``name:offset``), the title where the format has one (else ``""``), and the
paragraphs joined by ``\\n`` (reading the file back as ``jsonl:`` gives the same paragraphs). Documents without
text are counted drops (``empty``), as the pretraining pipeline counts them.

The run is a dataset run like every other (:func:`bertstream.pipelines.runners.dataset_run.run_dataset`): the
``--output`` policy, a ``manifest.json`` (kind ``documents``) with the counters, inputs and files, published
last. SplitFiles -> SpreadRanges -> WriteParts -> Publish: the read stage's ranges (a multistream dump's bzip2
streams, row groups, record batches, byte ranges of line formats; :func:`bertstream.pipelines.inputs.read
.ranges_of`) are each streamed into one part file in the work folder, in file order, so memory holds one
document at a time whatever the input's size; the last step names the parts ``documents-NNNNN-of-NNNNN`` in input
order and writes the manifest. The ranges depend on the inputs' sizes only, so the files are the same bytes on
any runner and for any worker count.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.dataset import DatasetHeader, RunResult, write_text_atomic
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.output_dir import Claim, OutputPolicy
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.extract_config import ExtractConfig, ExtractJob
from bertstream.pipelines.inputs.documents import Document
from bertstream.pipelines.inputs.read import FileRange, range_bytes_for, range_documents, ranges_of
from bertstream.pipelines.inputs.resolve import check_text_field, describe_inputs, input_format_of, resolve_inputs
from bertstream.pipelines.runners.dataset_run import DatasetRun, run_dataset
from bertstream.pipelines.runners.runner import pipeline_options
from bertstream.schemas.hashing import hash64
from bertstream.schemas.manifest import DOCUMENTS_KIND, MANIFEST_NAME, ShardInfo

SHARD_PREFIX = "documents"
LINES_WRITTEN = "lines_written"


def _is_output(name: str) -> bool:
    return name.startswith((MANIFEST_NAME, f"{SHARD_PREFIX}-"))


POLICY = OutputPolicy(
    "bertprep extract", _is_output, kinds=(DOCUMENTS_KIND,), what="extracted documents'", with_vocab=False
)


def document_record(doc: Document) -> dict[str, str]:
    """The JSON object of one document."""
    return {"id": doc.source_id or doc.doc_id, "title": doc.title, "text": "\n".join(doc.paragraphs)}


def document_lines(docs: Iterable[Document], counters: Counter) -> Iterator[bytes]:
    """The JSON lines of the documents with text; counts them used, and those without dropped (``empty``)."""
    for doc in docs:
        if not doc.paragraphs:
            counters[C.drop(C.EMPTY)] += 1
            continue
        counters[C.DOCUMENTS_USED] += 1
        yield (json.dumps(document_record(doc), ensure_ascii=False) + "\n").encode("utf-8")


def shard_name(index: int, num_shards: int, gzipped: bool) -> str:
    return f"{SHARD_PREFIX}-{index:05d}-of-{num_shards:05d}.jsonl" + (".gz" if gzipped else "")


class _Counted:
    """A binary sink that hashes and counts what passes through it to ``raw``."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.sha256, self.bytes = raw, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.bytes += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def write_lines(path: str, lines: Iterable[bytes], gzipped: bool) -> tuple[int, int, str]:
    """Stream ``lines`` into ``path`` (gzip without a name or time stamp: equal lines, equal bytes): the lines,
    the bytes and the sha256 written."""
    count = 0
    with FileSystems.create(path, compression_type="uncompressed") as raw:
        sink = _Counted(raw)
        out: Any = gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0, compresslevel=6) if gzipped else sink
        for line in lines:
            out.write(line)
            count += 1
        if gzipped:
            out.close()
    return count, sink.bytes, sink.sha256.hexdigest()


@dataclass(frozen=True, slots=True)
class ExtractSpec:
    """Where parts are written (the run's work folder) and files published, whether gzipped, how the read stage
    reads (``strip_gutenberg``, ``text_field``), and the manifest's header."""

    output_dir: str
    work_dir: str
    gzip: bool
    header: DatasetHeader
    strip_gutenberg: bool = True
    text_field: str = "text"


def write_part(spec: ExtractSpec, r: FileRange) -> dict[str, Any]:
    """Stream the documents of one range into a part file of the work folder: where it goes in the output (the
    input's name, the range's start), the part's path and manifest entry, the range's counters."""
    counters: Counter = Counter()
    docs = range_documents(r, counters, spec.strip_gutenberg, spec.text_field)
    suffix = ".jsonl.gz" if spec.gzip else ".jsonl"
    part = FileSystems.join(spec.work_dir, f"part-{hash64(r.name, r.start):016x}{suffix}")
    count, size, sha256 = write_lines(part, document_lines(docs, counters), spec.gzip)
    C.report(counters)
    return {
        "order": (r.name, r.start),
        "part": part,
        "count": count,
        "bytes": size,
        "sha256": sha256,
        "counters": dict(counters),
    }


def publish(spec: ExtractSpec, parts: list[dict[str, Any]]) -> str:
    """Name the parts in input order, check the counters, publish the manifest; its text."""
    parts = sorted(parts, key=lambda p: p["order"])
    counters = C.merge(p["counters"] for p in parts)
    read, used, drops = counters.get(C.DOCUMENTS_READ, 0), counters.get(C.DOCUMENTS_USED, 0), C.dropped(counters)
    if read != used + sum(drops.values()):
        raise RuntimeError(f"counters do not reconcile: documents read {read} != used {used} + dropped {drops}")
    written = sum(p["count"] for p in parts)
    if written != used:  # a runner that loses elements must fail the run, not publish less
        raise RuntimeError(f"documents lost before the files: {used} used, {written} written")
    first: dict[str, tuple[str, int]] = {}
    for p in parts:  # a manifest lists no file twice (a dataset is its content): refused before anything is named
        seen = first.setdefault(p["sha256"], p["order"])
        if seen != p["order"] and p["count"]:
            (a, a_start), (b, b_start) = seen, p["order"]
            raise InputError(
                f"{b} (from byte {b_start}) yields the very documents of {a} (from byte {a_start}): the same input "
                "twice? give it once"
            )
    names = [shard_name(i, len(parts), spec.gzip) for i in range(len(parts))]
    FileSystems.rename([p["part"] for p in parts], [FileSystems.join(spec.output_dir, n) for n in names])
    shards = tuple(
        ShardInfo(path=n, format="jsonl", count=p["count"], bytes=p["bytes"], sha256=p["sha256"])
        for n, p in zip(names, parts)
    )
    counters[LINES_WRITTEN] = written
    manifest = spec.header.manifest(
        kind=DOCUMENTS_KIND,
        shards=shards,
        totals={"documents": written, "bytes": {"jsonl": sum(s.bytes for s in shards)}},
        counters=counters,
        statistics={},
        bytes_read=counters.get(C.BYTES_READ, 0),
    )
    text = manifest.to_json()
    write_text_atomic(FileSystems.join(spec.output_dir, MANIFEST_NAME), text)
    return text


class _WritePartFn(beam.DoFn):
    def __init__(self, spec: ExtractSpec) -> None:
        self.spec = spec

    def process(self, element: FileRange) -> Iterator[dict[str, Any]]:
        yield write_part(self.spec, element)


class WriteDocuments(beam.PTransform):
    """``PCollection[(path, format, name, size, mtime)]`` -> the ``documents-*`` files and ``manifest.json``;
    yields the manifest's text."""

    def __init__(self, spec: ExtractSpec, range_bytes: int) -> None:
        super().__init__()
        self.spec = spec
        self.range_bytes = range_bytes

    def expand(self, files):
        return (
            files
            | "SplitFiles" >> beam.FlatMap(ranges_of, self.range_bytes, self.spec.text_field)
            | "SpreadRanges" >> beam.Reshuffle()
            | "WriteParts" >> beam.ParDo(_WritePartFn(self.spec))
            | "ListParts" >> beam.combiners.ToList()
            | "Publish" >> beam.Map(lambda parts, spec: publish(spec, parts), self.spec)
        )


def run_extract(job: ExtractJob) -> RunResult:
    """Validate, build and run ``bertprep extract``; return its manifest. Raises before Beam starts on bad
    input."""
    cfg, beam_args = job.config, list(job.beam_args)
    options = pipeline_options(beam_args, {"input": list(job.inputs), "output": [job.output]})
    files = resolve_inputs(list(job.inputs), cfg.input_format)
    check_text_field(files, cfg.text_field)
    formats = input_format_of(files)
    if isinstance(formats, str) and formats != cfg.input_format:
        cfg = replace(cfg, input_format=formats)
    input_bytes = sum(f.bytes for f in files)
    if not input_bytes:
        raise UsageError("input", f"{describe_inputs(files)}: empty (0 bytes), no documents to extract")

    def header(claim: Claim, run: dict) -> DatasetHeader:
        return DatasetHeader(
            vocab={},
            parameters={**_parameters(cfg), "input_format": formats},
            inputs=tuple({"path": redact_text(f.path), "bytes": f.bytes, "format": f.format} for f in files),
            run=run,
        )

    def build(p: beam.Pipeline, claim: Claim, head: DatasetHeader) -> None:
        spec = ExtractSpec(
            output_dir=claim.output_dir,
            work_dir=claim.work_dir,
            gzip=cfg.gzip,
            header=head,
            strip_gutenberg=cfg.strip_gutenberg,
            text_field=cfg.text_field,
        )
        inputs = p | "Inputs" >> beam.Create([(f.path, f.format, f.name or f.path, f.bytes, f.mtime) for f in files])
        _ = inputs | "Extract" >> WriteDocuments(spec, range_bytes_for(input_bytes))

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
            announce=lambda claim: f"{len(files)} input files, {input_bytes / 1e6:.1f} MB -> {claim.output_dir}",
            check=check,
        )
    )


def _parameters(cfg: ExtractConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in cfg.__slots__}
