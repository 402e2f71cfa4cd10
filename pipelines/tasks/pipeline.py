"""The task pipelines: task files -> featurized shards + manifest, for every kind in ``kinds.KINDS``.

``run_task`` validates everything that can be validated before Beam starts (runner options, inputs, then the
kind's plan: the columns named by flags, vocabulary and casing against ``--label-set-from``; the output
directory), builds the pipeline from the stage composites and the kind's plan, runs it and returns the manifest:

    Read -> Labels -> Featurize -> AssignShard/Write -> (the kind's files) -> Finalize

The split name (``--split``, else from the file names) decides whether the data is a training split.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from functools import partial
from typing import Any

import apache_beam as beam

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.counters import dropped
from bertstream.pipelines.common.dataset import DatasetHeader, RunResult, ShardSizing
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.output_dir import Claim, OutputPolicy
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.inputs.resolve import InputFile, describe_inputs, resolve_inputs
from bertstream.pipelines.runners.dataset_run import DatasetRun, run_dataset
from bertstream.pipelines.runners.runner import pipeline_options
from bertstream.pipelines.tasks import read as R
from bertstream.pipelines.tasks.features import Featurize, Layout
from bertstream.pipelines.tasks.finalize import FinalizeTask, FinalizeTaskSpec
from bertstream.pipelines.tasks.kind import Inputs, Plan, TaskIO, TaskKind
from bertstream.pipelines.tasks.kinds import KINDS, kind_of
from bertstream.pipelines.tasks.labels import Labels
from bertstream.pipelines.tasks.write import ShardSpec, WriteTaskShards
from bertstream.pipelines.tokenizer import wordpiece_backend as WB
from bertstream.pipelines.tokenizer.load import check_casing, load_tokenizer, vocab_entry
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


# The files kinds write beside their shards (SQuAD's examples.jsonl).
_KIND_FILES = tuple(name for kind in KINDS for name in kind.files)


def _is_output(name: str) -> bool:
    """A file of a task dataset (or of a killed run writing one): manifest, shards of any kind, a kind's files,
    vocab."""
    return name in (MANIFEST_NAME, *_KIND_FILES, VOCAB_FILENAME) or bool(_SHARD_FILE.match(name)) or _is_temporary(name)


def _is_temporary(name: str) -> bool:
    """A file an unfinished run was writing: ``manifest.json.tmp``, ``train-00000-of-00001.arrow.tmp``."""
    base = name.removesuffix(".tmp")
    return name.endswith(".tmp") and (base in (MANIFEST_NAME, *_KIND_FILES) or bool(_SHARD_FILE.match(base)))


# Any kind's dataset may be replaced by another's (a classification run writes regression rows too).
POLICY = OutputPolicy(
    "bertprep task", _is_output, kinds=tuple(k for kind in KINDS for k in kind.layouts), what="a task dataset's"
)


def run_task(job: Any) -> RunResult:
    """Run the job of any kind (``ClassificationJob``, ``NerJob``, ``SquadJob``): resolve the inputs, let the
    kind plan, build and run the pipeline."""
    kind = kind_of(job)
    source = getattr(job, "label_source", None)  # --label-set-from: a URL is probed as the other flags' are
    got = _inputs(job.io, getattr(source, "label_set_from", None))
    return _run(kind, kind.plan(job, got), job.io, got)


def _run(kind: TaskKind, plan: Plan, io: TaskIO, got: Inputs) -> RunResult:
    cfg, files, spec, label_set_from = plan.cfg, got.files, got.spec, plan.label_set_from
    rows = kind.layouts[cfg.kind]  # the contract's layout its rows fit, recorded in the manifest
    input_bytes = sum(f.bytes for f in files)
    num_shards = cfg.num_shards or SHARD_SIZING.num_shards(input_bytes)

    def header(claim: Claim, run: dict[str, Any]) -> DatasetHeader:
        return DatasetHeader(
            vocab=vocab_entry(spec),
            parameters={**cfg.to_dict(), **plan.parameters, "num_shards": num_shards},
            inputs=tuple({"path": redact_text(f.path), "bytes": f.bytes} for f in files),
            task={
                "kind": cfg.kind,
                "layout": rows.name,
                "split": cfg.split,
                "training": cfg.training,
                "max_seq_length": cfg.max_seq_length,
                "ignore_index": T.IGNORE_INDEX,
                **({"max_rows": io.max_rows} if io.max_rows else {}),
                **plan.task,
            },
            # Task featurizers need offsets, which only `tokenizers` gives.
            run={**run, "tokenizer": WB.backend(WB.HF).entry()},
        )

    def build(p: beam.Pipeline, claim: Claim, head: DatasetHeader) -> None:
        shard_spec = ShardSpec(
            output_dir=claim.output_dir,
            kind=cfg.kind,
            layout=rows,
            unit=kind.unit,
            label=plan.label,
            num_shards=num_shards,
            id_type=spec.vocab.id_type,
            vocab_sha256=spec.vocab.sha256,
            parameters={**cfg.shard_parameters(), **plan.parameters},
            compression=cfg.arrow_compression,
            batch_rows=cfg.arrow_batch_rows,
        )
        inputs = p | "Inputs" >> beam.Create([(i, f.path, f.bytes, f.mtime) for i, f in enumerate(files)])
        read = inputs | "Read" >> R.ReadRecords(plan.parser)
        if io.max_rows:  # the split's first --max-rows records only: every later stage reads these
            limited = read | "MaxRows" >> R.MaxRows(io.max_rows, kind.unit)
            beyond = limited[R.TALLIES]
            read = {**read, "records": limited["records"], R.COUNTS: limited[R.COUNTS]}
        layout = read[R.COUNTS] | "Counts" >> beam.combiners.ToList() | "Layout" >> beam.Map(Layout.from_counts)
        labels = read["records"] | "Labels" >> Labels(plan.labels)
        feats = read["records"] | "Featurize" >> Featurize(plan.featurizer, labels=labels, layout=layout)
        results = feats["features"] | "Write" >> WriteTaskShards(shard_spec, labels=labels, layout=layout)
        extra = kind.write_files(read["records"], claim.output_dir, layout)
        if extra is None:
            extra = p | "NoFiles" >> beam.Create([[]])
        tallies = (
            read[R.TALLIES],
            feats["tallies"],
            *([beyond] if io.max_rows else []),
        ) | "AllTallies" >> beam.Flatten()
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
            check=partial(_check_rows, files, kind.unit),
        )
    )


def _check_rows(files: list[InputFile], unit: str, result: RunResult) -> None:
    """What is read is what is meant: a header-only TSV or ``{"data": []}`` is no dataset (fine-tuning on it
    failed later, in Arrow); the run is unpublished and the earlier dataset, if any, comes back."""
    if not result.manifest.totals.get("rows"):
        m = result.manifest
        drops = ", ".join(f"{n} {why}" for why, n in dropped(m.counters, unit).items()) or "none dropped"
        raise InputError(
            f"--input {describe_inputs(files)}: no rows ({m.counters.get(f'{unit}_read', 0)} {unit} read; {drops})"
        )


def _inputs(io: TaskIO, label_set_from: str | None = None) -> Inputs:
    reaches = {"input": list(io.inputs), "vocab": [io.vocab], "output": [io.output]}
    reaches["label-set-from"] = [label_set_from or ""]
    options = pipeline_options(list(io.beam_args), reaches)
    files = resolve_inputs(list(io.inputs))
    if len(files) > T.MAX_FILES:
        raise UsageError("input", f"{len(files)} files, at most {T.MAX_FILES}")
    spec = load_tokenizer(io.vocab, io.lowercase)
    check_casing(spec, io.lowercase)
    return Inputs(options, files, spec, io.split or infer_split([f.path for f in files]))
