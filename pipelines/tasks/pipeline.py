"""The task pipelines: task files -> featurized shards + manifest, for classification, NER and SQuAD.

``run_task`` validates everything that can be validated before Beam starts (runner options, inputs, the
columns named by flags, vocabulary and casing against ``--label-set-from``, the output directory), builds
the pipeline from the stage composites, runs it and returns the manifest:

    Read -> Labels -> Featurize -> AssignShard/Write -> (WriteExamples) -> Finalize

The split name (``--split``, else from the file names) decides whether the data is a training split.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import apache_beam as beam

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import wordpiece_backend as WB
from bertstream.pipelines.common.counters import dropped
from bertstream.pipelines.common.dataset_run import (
    DatasetHeader,
    DatasetRun,
    RunResult,
    ShardSizing,
    load_manifest,
    run_dataset,
    vocab_entry,
)
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.output_dir import Claim, OutputPolicy
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.common.tokenizer import TokenizerSpec, load_tokenizer
from bertstream.pipelines.inputs.resolve import InputFile, describe_inputs, resolve_inputs
from bertstream.pipelines.runners.runner import pipeline_options
from bertstream.pipelines.tasks import read as R
from bertstream.pipelines.tasks.classification import RowFeaturizer
from bertstream.pipelines.tasks.config import (
    ClassificationConfig,
    ClassificationJob,
    NerConfig,
    NerJob,
    SquadConfig,
    SquadJob,
    TaskConfig,
    TaskIO,
)
from bertstream.pipelines.tasks.conll import ConllParser, looks_like_conll
from bertstream.pipelines.tasks.features import Featurize, Layout
from bertstream.pipelines.tasks.finalize import UNITS, FinalizeTask, FinalizeTaskSpec
from bertstream.pipelines.tasks.labels import LabelPlan, Labels, labels_from_manifest, plan_labels
from bertstream.pipelines.tasks.ner import SentenceFeaturizer
from bertstream.pipelines.tasks.squad import ExampleFeaturizer
from bertstream.pipelines.tasks.squad_json import SquadParser
from bertstream.pipelines.tasks.tables import TableLayout, TableParser, check_table_layout, first_line
from bertstream.pipelines.tasks.write import ShardSpec, WriteExamples, WriteTaskShards
from bertstream.schemas import tasks as T
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.vocab import VOCAB_FILENAME

# About 32 MB of input per shard, 1 to 4 shards: task datasets are small and read whole.
SHARD_SIZING = ShardSizing(bytes_per_shard=32 << 20, at_least=1, at_most=4)
_SPLIT_WORD = re.compile(r"(train|dev|validation|valid|val|test)(_matched|_mismatched)?")
_SHARD_FILE = re.compile(r"^[a-z]+-\d{5}-of-\d{5}\.(arrow|tar)$")


def infer_split(paths: list[str]) -> str:
    """``train``, ``dev``, ``valid``, ``test`` (with ``_matched``/``_mismatched``) from the file names; all
    inputs must agree, else ``--split`` is needed."""
    found = set()
    for p in paths:
        stem = os.path.basename(p.rstrip("/")).split(".")[0].lower()
        m = _SPLIT_WORD.search(stem)
        found.add(m.group(0) if m else None)
    if len(found) != 1 or None in found:
        raise UsageError(
            "split",
            f"cannot tell the split from the file names {[os.path.basename(p) for p in paths][:4]}; "
            "pass --split NAME (train for a training split)",
        )
    split = found.pop()
    assert split is not None  # refused above
    return split


def is_training(split: str) -> bool:
    return split.startswith("train")


def _is_output(name: str) -> bool:
    """A file of a task dataset (or of a killed run writing one): manifest, shards of any kind, examples, vocab."""
    return (
        name in (MANIFEST_NAME, T.EXAMPLES_FILE, VOCAB_FILENAME) or bool(_SHARD_FILE.match(name)) or _is_temporary(name)
    )


def _is_temporary(name: str) -> bool:
    """A file an unfinished run was writing: ``manifest.json.tmp``, ``train-00000-of-00001.arrow.tmp``."""
    base = name.removesuffix(".tmp")
    return name.endswith(".tmp") and (base in (MANIFEST_NAME, T.EXAMPLES_FILE) or bool(_SHARD_FILE.match(base)))


POLICY = OutputPolicy("bertprep task", _is_output, kinds=T.KINDS, what="a task dataset's")


@dataclass(frozen=True, slots=True)
class _Plan:
    """The kind-specific pieces ``_run`` assembles."""

    cfg: TaskConfig
    parser: R.Parser
    featurizer: Any  # () -> featurizer
    labels: LabelPlan
    task: dict[str, Any]


def _label_manifest(label_set_from: str | None, kind: str, spec: TokenizerSpec) -> tuple[str, ...] | None:
    if not label_set_from:
        return None
    try:
        manifest = load_manifest(label_set_from)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError("label-set-from", str(e)) from None
    return labels_from_manifest(
        manifest, label_set_from, kind=kind, vocab_sha256=spec.vocab.sha256, lowercase=spec.lowercase
    )


def _run(plan: _Plan, io: TaskIO, got: _Inputs, label_set_from: str | None = None) -> RunResult:
    cfg, files, spec = plan.cfg, got.files, got.spec
    input_bytes = sum(f.bytes for f in files)
    num_shards = cfg.num_shards or SHARD_SIZING.num_shards(input_bytes)

    def header(claim: Claim, run: dict[str, Any]) -> DatasetHeader:
        return DatasetHeader(
            vocab=vocab_entry(spec),
            parameters={**cfg.to_dict(), "num_shards": num_shards},
            inputs=tuple({"path": redact_text(f.path), "bytes": f.bytes} for f in files),
            task={
                "kind": cfg.kind,
                "split": cfg.split,
                "training": cfg.training,
                "max_seq_length": cfg.max_seq_length,
                "ignore_index": T.IGNORE_INDEX,
                **plan.task,
            },
            # Task featurizers need offsets, which only `tokenizers` gives.
            run={**run, "tokenizer": WB.backend(WB.HF).entry()},
        )

    def build(p: beam.Pipeline, claim: Claim, head: DatasetHeader) -> None:
        shard_spec = ShardSpec(
            output_dir=claim.output_dir,
            kind=cfg.kind,
            num_shards=num_shards,
            id_type=spec.vocab.id_type,
            vocab_sha256=spec.vocab.sha256,
            parameters=cfg.shard_parameters(),
            compression=cfg.arrow_compression,
            batch_rows=cfg.arrow_batch_rows,
        )
        inputs = p | "Inputs" >> beam.Create([(i, f.path, f.bytes, f.mtime) for i, f in enumerate(files)])
        read = inputs | "Read" >> R.ReadRecords(plan.parser)
        layout = read[R.COUNTS] | "Counts" >> beam.combiners.ToList() | "Layout" >> beam.Map(Layout.from_counts)
        labels = read["records"] | "Labels" >> Labels(plan.labels, cfg.kind)
        feats = read["records"] | "Featurize" >> Featurize(plan.featurizer, labels=labels, layout=layout)
        results = feats["features"] | "Write" >> WriteTaskShards(shard_spec, labels=labels, layout=layout)
        if cfg.kind == T.SQUAD:
            extra = read["records"] | "WriteExamples" >> WriteExamples(claim.output_dir, layout=layout)
            extra = extra | "AsList" >> beam.Map(lambda info: [info])
        else:
            extra = p | "NoFiles" >> beam.Create([[]])
        tallies = (read[R.TALLIES], feats["tallies"]) | "AllTallies" >> beam.Flatten()
        finalize = FinalizeTaskSpec(shards=shard_spec, plan=plan.labels, header=head, vocab_text=spec.vocab.text())
        _ = results | "Finalize" >> FinalizeTask(finalize, tallies=tallies, labels=labels, files=extra)

    return run_dataset(
        DatasetRun(
            policy=replace(POLICY, command=f"bertprep task {cfg.kind}"),
            output=io.output,
            overwrite=io.overwrite,
            reads={"input": [f.path for f in files], "vocab": [spec.source], "label-set-from": [label_set_from or ""]},
            options=got.options,
            beam_args=tuple(io.beam_args),
            input_bytes=input_bytes,
            header=header,
            build=build,
            announce=lambda claim: (
                f"{cfg.kind} {cfg.split}: {len(files)} input files, {input_bytes / 1e6:.1f} MB -> {claim.output_dir} "
                f"({num_shards} shards)"
            ),
            check=partial(_check_rows, files),
        )
    )


def _check_rows(files: list[InputFile], result: RunResult) -> None:
    """What is read is what is meant: a header-only TSV or ``{"data": []}`` is no dataset (fine-tuning on it
    failed later, in Arrow); the run is unpublished and the earlier dataset, if any, comes back."""
    if not result.manifest.totals.get("rows"):
        m = result.manifest
        unit = UNITS[m.kind]
        drops = ", ".join(f"{n} {why}" for why, n in dropped(m.counters, unit).items()) or "none dropped"
        raise InputError(
            f"--input {describe_inputs(files)}: no rows ({m.counters.get(f'{unit}_read', 0)} {unit} read; {drops})"
        )


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What every task resolves before its own checks: runner options, input files, tokenizer, split."""

    options: Any
    files: list[InputFile]
    spec: TokenizerSpec
    split: str

    def shared(self, io: TaskIO, max_seq_length: int, labels: tuple[str, ...] = ()) -> dict[str, Any]:
        """The ``TaskConfig`` fields every kind sets alike."""
        return dict(
            split=self.split,
            training=is_training(self.split),
            max_seq_length=max_seq_length,
            lowercase=self.spec.lowercase,
            labels=tuple(labels),
            num_shards=io.num_shards,
        )


def _inputs(io: TaskIO) -> _Inputs:
    options = pipeline_options(list(io.beam_args))
    files = resolve_inputs(list(io.inputs))
    if len(files) > T.MAX_FILES:
        raise UsageError("input", f"{len(files)} files, at most {T.MAX_FILES}")
    spec = load_tokenizer(io.vocab, io.lowercase)
    return _Inputs(options, files, spec, io.split or infer_split([f.path for f in files]))


# --------------------------------------------------------------------------------------------- per kind


def run_classification(job: ClassificationJob) -> RunResult:
    """Text (pair) classification or regression from TSV/CSV/JSONL, or a GLUE preset."""
    from bertstream.pipelines.tasks import glue as G

    io, got = job.io, _inputs(job.io)
    files, spec, glue = got.files, got.spec, job.glue
    input_format, header, regression = job.input_format, job.header, job.regression
    text_column, text_pair_column, label_column = job.text_column, job.text_pair_column, job.label_column
    preset = None
    if glue is not None:
        if glue not in G.PRESETS:
            raise UsageError("glue", f"must be one of {G.NAMES}, got {glue!r}")
        if any(x is not None for x in (text_column, text_pair_column, label_column)):
            raise UsageError(
                "glue",
                "--glue sets the columns; do not combine it with --text-column, --text-pair-column or --label-column",
            )
        if input_format not in (None, "tsv"):
            raise UsageError("format", f"GLUE files are tsv, got --format {input_format}")
        preset = G.PRESETS[glue]
        layouts = {G.resolve(preset, _fields(first_line(f.path, "tsv")), f.path) for f in files}
        if len(layouts) != 1:
            raise UsageError(
                "input", f"the inputs mix GLUE {glue} layouts (labeled and test files?): {sorted(map(str, layouts))}"
            )
        gl = layouts.pop()
        input_format, header = "tsv", gl.header
        text_column, text_pair_column, label_column = gl.text, gl.pair, gl.label
        regression = preset.regression
    else:
        input_format = input_format or _format_from_name(files[0].path)
        if text_column is None:
            raise UsageError("text-column", "--text-column is required (or a --glue preset)")
        if label_column is None and not job.no_labels:
            raise UsageError(
                "label-column", "--label-column is required for labeled data (--no-labels for a test file)"
            )
    if job.no_labels:
        label_column = None
    kind = T.REGRESSION if regression else T.CLASSIFICATION
    label_set_from = job.label_source.label_set_from
    cfg = ClassificationConfig(
        kind=kind,
        **got.shared(io, job.max_seq_length, job.label_source.labels),
        input_format=input_format,
        header=header,
        text_column=text_column,
        text_pair_column=text_pair_column,
        label_column=label_column,
        glue=glue,
    )
    layout = TableLayout(
        cfg.input_format, cfg.header, cfg.text_column, cfg.text_pair_column, cfg.label_column, regression=regression
    )
    for f in files:
        check_table_layout(f.path, layout)
    label_plan = _plan_labels(
        cfg,
        got,
        label_set_from,
        labeled=label_column is not None,
        preset=preset.labels if preset else None,
        preset_name=glue,
    )
    if kind == T.REGRESSION and label_set_from:
        _label_manifest(label_set_from, kind, spec)  # same vocab and casing, even without labels
    featurizer = partial(
        RowFeaturizer,
        spec,
        kind=kind,
        max_seq_length=cfg.max_seq_length,
        training=cfg.training,
        labeled=label_column is not None,
        label_source=label_plan.source,
    )
    columns = {"format": input_format, "header": header, "text": text_column, "text_pair": text_pair_column}
    task = {"labeled": label_column is not None, "glue": glue, "columns": {**columns, "label": label_column}}
    return _run(_Plan(cfg, TableParser(layout), featurizer, label_plan, task), io, got, label_set_from)


def _plan_labels(
    cfg: TaskConfig, got: _Inputs, label_set_from: str | None, *, labeled: bool, preset=None, preset_name=None
) -> LabelPlan:
    """The label plan of a classification or NER task (a regression task's is ``none``, from its kind)."""
    from_manifest = _label_manifest(label_set_from, cfg.kind, got.spec) if cfg.kind != T.REGRESSION else None
    return plan_labels(
        kind=cfg.kind,
        training=cfg.training,
        labeled=labeled,
        explicit=cfg.labels,
        preset=preset,
        preset_name=preset_name,
        from_manifest=from_manifest,
        manifest_dir=label_set_from,
        split=cfg.split,
    )


def _format_from_name(path: str) -> str:
    lower = path.lower()
    for ext in (".gz", ".bz2", ".zst", ".zstd", ".xz"):
        if lower.endswith(ext):
            lower = lower[: -len(ext)]
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "tsv"


def run_ner(job: NerJob) -> RunResult:
    """Token classification from CoNLL-2003 style files, or ``char TAG`` files (``input_format="char-tag"``)."""
    io, got = job.io, _inputs(job.io)
    cfg = NerConfig(
        kind=T.NER,
        **got.shared(io, job.max_seq_length, job.label_source.labels),
        scheme=job.scheme,
        window_overlap=job.window_overlap,
    )
    for f in got.files:
        looks_like_conll(f.path, input_format=job.input_format)
    label_set_from = job.label_source.label_set_from
    label_plan = _plan_labels(cfg, got, label_set_from, labeled=True)
    featurizer = partial(
        SentenceFeaturizer,
        got.spec,
        max_seq_length=cfg.max_seq_length,
        window_overlap=cfg.window_overlap,
        training=cfg.training,
        label_source=label_plan.source,
    )
    task = {"labeled": True, "scheme": "iob2", "input_scheme": cfg.scheme, "window_overlap": cfg.window_overlap}
    if job.input_format != "conll":  # only then: manifests of CoNLL runs stay as they were
        task["input_format"] = job.input_format
    parser = ConllParser(cfg.scheme, job.input_format)
    return _run(_Plan(cfg, parser, featurizer, label_plan, task), io, got, label_set_from)


def run_squad(job: SquadJob) -> RunResult:
    """Extractive question answering from SQuAD v1.1 / v2.0 JSON."""
    io, got = job.io, _inputs(job.io)
    cfg = SquadConfig(
        kind=T.SQUAD,
        **got.shared(io, job.max_seq_length),
        doc_stride=job.doc_stride,
        max_query_length=job.max_query_length,
        articles=job.articles,
    )
    for f in got.files:
        head = b"".join(_head(f.path)).lstrip(b"\xef\xbb\xbf \t\r\n")
        if not head.startswith(b"{"):
            raise UsageError("input", f"{f.path}: not SQuAD JSON (does not start with '{{')")
    featurizer = partial(
        ExampleFeaturizer,
        got.spec,
        max_seq_length=cfg.max_seq_length,
        doc_stride=cfg.doc_stride,
        max_query_length=cfg.max_query_length,
    )
    task = {
        "labeled": True,
        "doc_stride": cfg.doc_stride,
        "max_query_length": cfg.max_query_length,
        "articles": None if cfg.articles is None else list(cfg.articles),
    }
    parser = SquadParser(cfg.articles, cfg.training)
    return _run(_Plan(cfg, parser, featurizer, LabelPlan((), "none"), task), io, got)


def _fields(first: list[str] | dict | None) -> list[str]:
    """A tsv file's first line as fields (a tsv never yields a JSON object)."""
    return first if isinstance(first, list) else []


def _head(path: str) -> list[bytes]:
    from bertstream.pipelines.common.files import read_chunks

    chunks = read_chunks(path, 1024)
    try:
        return [next(chunks, b"")]
    finally:
        chunks.close()
