"""The pretraining pipeline: text files -> masked NSP instances -> shards + manifest.

``run_pretraining`` validates everything that can be validated before Beam starts (inputs, vocabulary,
output directory, runner options), builds the pipeline from the stage composites, runs it, and returns the
manifest. Read -> Segment -> Tokenize -> Group -> CreateInstances -> Mask -> ShuffleAndWrite -> Finalize.
With ``--dedup``, Dedup follows Read; with ``--eval-fraction``, HoldOut then splits the documents between two
datasets, each made by the stages from Segment on (:mod:`bertstream.pipelines.pretraining.holdout`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import source_stats as SS
from bertstream.pipelines.common.dataset import DatasetHeader, RunResult, ShardSizing, load_manifest, unpublish
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.output_dir import Claim, OutputPolicy, remove_empty_made
from bertstream.pipelines.common.progress import Monitor
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.common.spill import spill_bytes_for
from bertstream.pipelines.inputs.read import ReadDocuments, range_bytes_for
from bertstream.pipelines.inputs.resolve import (
    InputFile,
    check_text_field,
    describe_inputs,
    input_format_of,
    resolve_inputs,
)
from bertstream.pipelines.pretraining.chinese_words import check_word_segmenter
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.dedup import Dedup, DedupSpec, dedup_partitions
from bertstream.pipelines.pretraining.finalize import Finalize, FinalizeSpec
from bertstream.pipelines.pretraining.group import GroupDocuments, GroupSpec
from bertstream.pipelines.pretraining.holdout import EVAL_DIR, HoldOut
from bertstream.pipelines.pretraining.instances import CreateInstances
from bertstream.pipelines.pretraining.masking import MaskInstances
from bertstream.pipelines.pretraining.segment import SegmentDocuments
from bertstream.pipelines.pretraining.shipped import Shipped, ship
from bertstream.pipelines.pretraining.stats import StatsSpec
from bertstream.pipelines.pretraining.tokenize import Tokenize
from bertstream.pipelines.pretraining.write import SHARD_PREFIX, ShardSpec, WriteShards, WriteSpec
from bertstream.pipelines.runners.dataset_run import DatasetRun, run_dataset
from bertstream.pipelines.runners.runner import (
    local_threads_per_worker,
    pipeline_options,
    runner_name,
)
from bertstream.pipelines.tokenizer.load import TokenizerSpec, check_casing, load_tokenizer, vocab_entry
from bertstream.pipelines.tokenizer.wordpiece_backend import choose_backend
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest
from bertstream.schemas.vocab import CLS, SEP, VOCAB_FILENAME, Vocab

# Bytes the instance shuffle spills per input byte and dupe pass (measured: 0.73 at length 128, 30k vocab).
INSTANCE_SPILL_PER_BYTE = 0.75
# Input text per shard and pass: about 150,000 instances at length 128, 35 MB of Arrow. It also bounds the
# shard writer's memory (a shard is sorted in memory), whatever the corpus size. At least 4 shards.
SHARD_SIZING = ShardSizing(bytes_per_shard=64 << 20, at_least=4)


def _is_output(name: str) -> bool:
    """A file of a pretraining dataset (or of a killed run writing one): its manifest or a shard, or the
    folder of the evaluation dataset written beside it (``--eval-fraction``: replaced with the run, always)."""
    return name.startswith((MANIFEST_NAME, VOCAB_FILENAME, f"{SHARD_PREFIX}-")) or name == EVAL_DIR


POLICY = OutputPolicy("bertprep pretraining", _is_output, kinds=("pretraining",), what="a pretraining dataset's")


def build_pipeline(
    p: beam.Pipeline,
    inputs: list[InputFile],
    cfg: PretrainingConfig,
    spec: TokenizerSpec,
    output_dir: str,
    work_dir: str,
    num_shards: int,
    header: DatasetHeader,
    tokenizer_threads: int = 1,
    tokenizer_backend: str | None = None,
    eval_split: DatasetSpec | None = None,
) -> None:
    """The run's graph: read (and dedup) once, then the stages of one dataset, or with ``eval_split``
    (``--eval-fraction``) of two, the held-out documents' written to ``eval_split.output_dir``."""
    files = p | "Inputs" >> beam.Create([(f.path, f.format, f.name or f.path, f.bytes, f.mtime) for f in inputs])
    input_bytes = sum(f.bytes for f in inputs)
    range_bytes = range_bytes_for(input_bytes)  # big files are read by many workers
    docs = files | "Read" >> ReadDocuments(cfg.strip_gutenberg, range_bytes, cfg.text_field)
    dedup_stats = None
    if cfg.dedup != "none":  # not in the graph by default: output stays byte-identical
        dedup = DedupSpec(
            mode=cfg.dedup,
            ngram=cfg.dedup_ngram,
            threshold=cfg.dedup_threshold,
            seed=cfg.seed,
            work_dir=work_dir,
            partitions=dedup_partitions(input_bytes),
        )
        docs, dedup_stats = docs | "Dedup" >> Dedup(dedup)
    # The tokenizer and vocabulary go to the workers by reference (pipelines.common.shipped): pickled into the
    # DoFns, Beam would compress and copy them about a dozen times a run.
    run = RunStages(
        cfg=cfg,
        spec=spec,
        shipped_spec=ship(spec, work_dir, "tokenizer"),
        shipped_vocab=ship(spec.vocab, work_dir, "vocab"),
        input_bytes=input_bytes,
        input_format=input_format_of(inputs),
        tokenizer_threads=tokenizer_threads,
        tokenizer_backend=tokenizer_backend,
        sources=SS.source_table((f.name or f.path, f.source or f.path) for f in inputs),
    )
    # Each dataset spills into a work folder of its own, which its Finalize removes: while the other's stages may
    # still be writing, and never the run's work folder itself, where an --overwrite's earlier dataset waits
    # (``previous``) until the run has ended. Finalize removed it whole: a run refused after publishing (no
    # instances) could not put the earlier dataset back, and said it was in a folder already gone.
    dataset = DatasetSpec(output_dir, FileSystems.join(work_dir, "train"), num_shards, header)
    if eval_split is None:  # not in the graph by default: output stays byte-identical
        add_dataset_stages(docs, run, dataset, statistics=dedup_stats)
        return
    train_docs, eval_docs = docs | "HoldOut" >> HoldOut(cfg.seed, cfg.eval_fraction)
    held = replace(eval_split, work_dir=FileSystems.join(work_dir, EVAL_DIR))
    add_dataset_stages(train_docs, run, dataset, statistics=dedup_stats)
    add_dataset_stages(eval_docs, run, held, split="eval", label="Eval")


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """One dataset a run writes: its folder, work folder, shard count and manifest header."""

    output_dir: str
    work_dir: str
    num_shards: int
    header: DatasetHeader


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStages:
    """What every dataset of a run is made with: the config, the tokenizer (and its shipped copies), the input's
    size and format, the tokenizer's threads and backend."""

    cfg: PretrainingConfig
    spec: TokenizerSpec
    shipped_spec: Shipped[TokenizerSpec]
    shipped_vocab: Shipped[Vocab]
    input_bytes: int
    input_format: str | dict[str, str]
    tokenizer_threads: int = 1
    tokenizer_backend: str | None = None
    sources: SS.SourceTable = ()  # one report source per --input


def add_dataset_stages(
    docs: beam.PCollection,
    run: RunStages,
    dataset: DatasetSpec,
    *,
    statistics: beam.PCollection | None = None,
    split: str = "train",
    label: str = "",
) -> None:
    """Segment -> Tokenize -> Group -> CreateInstances -> Mask -> ShuffleAndWrite -> Finalize: the documents
    ``docs`` to one complete dataset in ``dataset.output_dir`` (``label`` prefixes its stages' labels)."""
    cfg, vocab = run.cfg, run.spec.vocab
    shards = ShardSpec(
        output_dir=dataset.output_dir,
        num_shards=dataset.num_shards,
        seed=cfg.seed,
        formats=cfg.formats,
        id_type=vocab.id_type,
        vocab_sha256=vocab.sha256,
        parameters={**cfg.shard_parameters(split), "input_format": run.input_format},
        compression=cfg.arrow_compression,
        batch_rows=cfg.arrow_batch_rows,
    )
    stats = StatsSpec(
        mask_id=vocab.id("[MASK]"),
        max_seq_length=cfg.max_seq_length,
        max_predictions=cfg.max_predictions_per_seq,
        masked_lm_prob=cfg.masked_lm_prob,
        whole_word=cfg.whole_word_mask,
    )
    sentences = docs | f"{label}Segment" >> SegmentDocuments()
    tokenized = sentences | f"{label}Tokenize" >> Tokenize(
        run.shipped_spec,
        run.tokenizer_threads,
        cfg.word_segmenter,
        run.tokenizer_backend,
        cfg.max_num_tokens,
        run.sources,
    )
    grouping = GroupSpec(
        seed=cfg.seed,
        docs_per_group=cfg.docs_per_group,
        max_group_tokens=cfg.max_group_tokens,
        dupe_factor=cfg.dupe_factor,
        tokens_per_unit=cfg.tokens_per_unit,
        work_dir=dataset.work_dir,
    )
    units, groups = tokenized | f"{label}Group" >> GroupDocuments(grouping)
    raw = units | f"{label}CreateInstances" >> CreateInstances(
        max_num_tokens=cfg.max_num_tokens, short_seq_prob=cfg.short_seq_prob, cls_id=vocab.id(CLS), sep_id=vocab.id(SEP)
    )
    masked = raw | f"{label}Mask" >> MaskInstances(run.shipped_vocab, cfg.masking, word_marks=bool(cfg.word_segmenter))
    spill_bytes = spill_bytes_for(int(run.input_bytes * cfg.dupe_factor * INSTANCE_SPILL_PER_BYTE))
    write = WriteSpec(shards=shards, stats=stats, work_dir=dataset.work_dir, spill_bytes=spill_bytes)
    results = masked | f"{label}ShuffleAndWrite" >> WriteShards(write)
    counters = (
        tokenized | f"{label}Counters" >> beam.Map(lambda b: dict(b.counters)),
        # Counted where instances are made, checked against the shards: a runner that loses elements fails.
        raw | f"{label}CountInstances" >> beam.Map(lambda b: {C.INSTANCES_CREATED: len(b)}),
    ) | f"{label}AllCounters" >> beam.Flatten()
    finalize = FinalizeSpec(
        shards=shards,
        header=dataset.header,
        vocab=run.shipped_vocab,
        work_dir=dataset.work_dir,
        max_seq_length=cfg.max_seq_length,
    )
    _ = results | f"{label}Finalize" >> Finalize(
        finalize,
        counters=counters,
        groups=groups,
        unk_words=tokenized | f"{label}UnkWords" >> beam.Map(lambda b: b.unk_words),
        statistics=statistics,
    )


def run_pretraining(job: PretrainingJob) -> RunResult:
    """Validate, build and run the pipeline of ``job``; return its manifest. Raises before Beam starts on bad
    input."""
    cfg, inputs, vocab, overwrite = job.config, list(job.inputs), job.vocab, job.overwrite
    beam_args = list(job.beam_args)
    options = pipeline_options(beam_args, {"input": inputs, "vocab": [vocab], "output": [job.output]})
    files = resolve_inputs(inputs, cfg.input_format)
    check_text_field(files, cfg.text_field)
    formats = input_format_of(files)
    if isinstance(formats, str) and formats != cfg.input_format:  # all given as `text:...`, say
        cfg = replace(cfg, input_format=formats)
    spec = load_tokenizer(vocab, job.casing)
    check_casing(spec, job.casing, "casing")
    if cfg.word_segmenter:
        check_word_segmenter(cfg.word_segmenter, spec)
    if spec.lowercase != cfg.lowercase:
        cfg = replace(cfg, lowercase=spec.lowercase)
    # Decided once, here, for every worker (a fallback says why in one line).
    backend = choose_backend(spec.json, offsets=bool(cfg.word_segmenter), source=redact_text(spec.source))
    input_bytes = sum(f.bytes for f in files)
    if not input_bytes:
        raise UsageError("input", f"{describe_inputs(files)}: empty (0 bytes), nothing to make instances from")
    num_shards = cfg.num_shards or SHARD_SIZING.num_shards(input_bytes * cfg.dupe_factor)
    # --eval-fraction: the held-out documents' dataset, sized by their expected share of the input
    eval_shards = cfg.num_shards or SHARD_SIZING.num_shards(int(input_bytes * cfg.dupe_factor * cfg.eval_fraction))

    def header(claim: Claim, run: dict, split: str = "train") -> DatasetHeader:
        parameters = {**cfg.to_dict(), "input_format": formats, "num_shards": num_shards}
        if cfg.eval_fraction:  # which of the run's two datasets this is
            parameters.update(split=split, num_shards=eval_shards if split == "eval" else num_shards)
        return DatasetHeader(
            vocab=vocab_entry(spec),
            parameters=parameters,
            seed=cfg.seed,
            inputs=tuple({"path": redact_text(f.path), "bytes": f.bytes, "format": f.format} for f in files),
            run={**run, "tokenizer": backend.entry()},
        )

    def build(p: beam.Pipeline, claim: Claim, head: DatasetHeader) -> None:
        threads = local_threads_per_worker(options)
        held = None
        if cfg.eval_fraction:
            eval_head = replace(head, parameters=header(claim, head.run, "eval").parameters)
            held = DatasetSpec(eval_dir(claim.output_dir), claim.work_dir, eval_shards, eval_head)
        build_pipeline(
            p, files, cfg, spec, claim.output_dir, claim.work_dir, num_shards, head, threads, backend.name, held
        )

    def monitor() -> Monitor:
        local = runner_name(options) == "FnApiRunner"  # its workers, threads or processes, share this machine
        shards = num_shards + (eval_shards if cfg.eval_fraction else 0)
        return Monitor(files=len(files), input_bytes=input_bytes, shards=shards, local=local)

    def check(result: RunResult) -> None:
        c = result.manifest.counters
        if not cfg.eval_fraction:
            if not result.manifest.totals.get("instances"):
                raise InputError(
                    f"--input {describe_inputs(files)}: no instances ({c.get(C.DOCUMENTS_READ, 0)} documents read, "
                    f"{c.get(C.DOCUMENTS_USED, 0)} used, {c.get(C.TOKENS, 0)} tokens)"
                )
            return
        held_out = load_manifest(eval_dir(result.output_dir))
        try:
            check_both_sides(result.manifest, held_out, cfg.eval_fraction)
        except BaseException:
            unpublish(eval_dir(result.output_dir), held_out)  # then the training dataset goes too
            remove_empty_made(eval_dir(result.output_dir), eval_dir(result.output_dir))  # no leftover folder
            raise

    return run_dataset(
        DatasetRun(
            policy=POLICY,
            output=job.output,
            overwrite=overwrite,
            reads={"input": [f.path for f in files], "vocab": [vocab]},
            options=options,
            beam_args=tuple(beam_args),
            input_bytes=input_bytes,
            header=header,
            build=build,
            announce=lambda claim: (
                f"{len(files)} input files, {input_bytes / 1e6:.1f} MB -> {claim.output_dir} ({num_shards} shards)"
                + (
                    f", {cfg.eval_fraction:g} of the documents held out -> {eval_dir(claim.output_dir)} "
                    f"({eval_shards} shards)"
                    if cfg.eval_fraction
                    else ""
                )
            ),
            monitor=monitor,
            check=check,
        )
    )


def eval_dir(output_dir: str) -> str:
    """The evaluation dataset's folder of a run with ``--eval-fraction`` into ``output_dir``."""
    return FileSystems.join(output_dir, EVAL_DIR)


def check_both_sides(train: Manifest, held_out: Manifest, fraction: float) -> None:
    """Refuse a hold-out that leaves either dataset without instances, in one line."""
    read = train.counters.get(C.DOCUMENTS_READ, 0)
    moved = held_out.counters.get(C.DOCUMENTS_READ, 0)
    for manifest, name in ((train, "training"), (held_out, "evaluation")):
        if not manifest.totals.get("instances"):
            raise InputError(
                f"--eval-fraction {fraction:g} leaves the {name} dataset without instances ({moved} of {read} "
                f"documents held out, {manifest.counters.get(C.DOCUMENTS_USED, 0)} of them used there): "
                "choose a fraction that leaves documents on both sides"
            )
