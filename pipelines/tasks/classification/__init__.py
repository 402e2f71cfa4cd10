"""``bertprep task classification``: sentence (pair) classification or regression from TSV/CSV/JSONL tables,
or a GLUE preset (``glue.py``). Its job (the flags), its plan (columns resolved and checked before Beam starts,
the label plan), the parser (``parse.py``) and the featurizer (``featurize.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from bertstream.cli.errors import UsageError, check
from bertstream.cli.options import opt, section
from bertstream.pipelines.tasks.classification.glue import NAMES as GLUE_NAMES
from bertstream.pipelines.tasks.classification.glue import PRESETS as GLUE_PRESETS
from bertstream.pipelines.tasks.kind import (
    CLASS_INDEX,
    NO_LABELS,
    VALUE,
    Inputs,
    LabelSource,
    Plan,
    TaskConfig,
    TaskIO,
    TaskKind,
)
from bertstream.schemas import tasks as T

INPUT_FORMATS = ("tsv", "csv", "jsonl")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClassificationJob:
    """Columns are header names, or 0-based indices (as strings of digits) for files without a header."""

    io: TaskIO = section(TaskIO)
    glue: str | None = opt(
        None, "GLUE preset: columns, header quirks, standard labels (stsb: regression).", choices=GLUE_NAMES
    )
    input_format: str | None = opt(
        None, "Input format (default: from the extension; tsv).", flag="--format", choices=INPUT_FORMATS
    )
    text_column: str | None = opt(None, "Text column: header name, JSON field, or 0-based index with --no-header.")
    text_pair_column: str | None = opt(None, "Second text of a pair (same forms).")
    label_column: str | None = opt(None, "Label column (same forms).")
    header: bool = opt(True, "Whether tsv/csv files start with a header line.", flag="--header/--no-header", show=True)
    regression: bool = opt(False, "Float labels (task kind 'regression').")
    no_labels: bool = opt(False, "Unlabeled data (test files): rows without labels.")
    label_source: LabelSource = section(LabelSource)
    max_seq_length: int = opt(128, show=True)

    def __post_init__(self) -> None:
        # Flags that contradict are refused, not one of them dropped: both runs wrote a dataset, silently.
        check(
            not (self.no_labels and self.label_column is not None),
            "no_labels",
            f"reads no label; do not give --label-column {self.label_column!r} with it",
        )
        preset = GLUE_PRESETS.get(self.glue) if self.glue is not None else None
        check(
            not (self.regression and preset is not None and not preset.regression),
            "regression",
            f"--glue {self.glue} is a classification task (of the GLUE presets only stsb is regression)",
        )


class Classification(TaskKind):
    name = "classification"
    layouts = {T.CLASSIFICATION: T.SEQUENCE_CLASS, T.REGRESSION: T.SEQUENCE_VALUE}
    unit = "rows"  # one input record: the manifest counts rows_read, _used and _dropped.<reason>
    summary = "Sentence (pair) classification or regression: [CLS] A [SEP] (B [SEP]) + label."
    job = ClassificationJob

    def plan(self, job: ClassificationJob, got: Inputs) -> Plan:
        from bertstream.pipelines.tasks.classification import glue as G
        from bertstream.pipelines.tasks.classification.featurize import RowFeaturizer
        from bertstream.pipelines.tasks.classification.parse import (
            TableLayout,
            TableParser,
            check_table_layout,
            first_line,
        )
        from bertstream.pipelines.tasks.labels import label_manifest, plan_for

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
                    "--glue sets the columns; do not combine it with --text-column, --text-pair-column or "
                    "--label-column",
                )
            if input_format not in (None, "tsv"):
                raise UsageError("format", f"GLUE files are tsv, got --format {input_format}")
            preset = G.PRESETS[glue]
            layouts = {G.resolve(preset, _fields(first_line(f.path, "tsv")), f.path) for f in files}
            if len(layouts) != 1:
                raise UsageError(
                    "input",
                    f"the inputs mix GLUE {glue} layouts (labeled and test files?): {sorted(map(str, layouts))}",
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
        cfg = got.config(kind, job.io, job.max_seq_length, job.label_source.labels)
        layout = TableLayout(
            input_format,
            header,
            text_column,
            text_pair_column,
            label_column,
            regression=regression,
            score_range=preset.score_range if preset is not None else None,
        )
        _check_layout(cfg, layout)
        for f in files:
            check_table_layout(f.path, layout)
        labeled = label_column is not None
        label = VALUE if kind == T.REGRESSION else CLASS_INDEX  # float labels: a score, else a class
        if kind == T.REGRESSION:
            label_plan = NO_LABELS
            label_manifest(label_set_from, kind, spec)  # same vocab and casing, even without labels
        else:
            preset_labels = preset.labels if preset else None
            label_plan = plan_for(cfg, spec, label_set_from, labeled=labeled, preset=preset_labels, preset_name=glue)
        featurizer = partial(
            RowFeaturizer,
            spec,
            kind=kind,
            max_seq_length=cfg.max_seq_length,
            training=cfg.training,
            labeled=labeled,
            label_source=label_plan.source,
        )
        parameters = {
            "input_format": input_format,
            "header": header,
            "text_column": text_column,
            "text_pair_column": text_pair_column,
            "label_column": label_column,
            "glue": glue,
        }
        columns = {"format": input_format, "header": header, "text": text_column, "text_pair": text_pair_column}
        task = {"labeled": labeled, "glue": glue, "columns": {**columns, "label": label_column}}
        return Plan(cfg, TableParser(layout), featurizer, label_plan, parameters, task, label, label_set_from)


def _check_layout(cfg: TaskConfig, layout: Any) -> None:
    """The resolved columns (from the flags or a GLUE preset) make sense together; errors name the flag."""
    check(
        layout.input_format in INPUT_FORMATS,
        "input_format",
        f"must be one of {INPUT_FORMATS}, got {layout.input_format!r}",
    )
    check(bool(layout.text), "text_column", "is required (a column name, or an index without a header)")
    check(not (cfg.kind == T.REGRESSION and cfg.labels), "labels", "a regression task has no label set")
    if layout.input_format == "jsonl":
        check(layout.header, "header", "JSON lines have named fields; --no-header applies to tsv/csv")
    elif not layout.header:
        for param, v in (
            ("text_column", layout.text),
            ("text_pair_column", layout.pair),
            ("label_column", layout.label),
        ):
            check(v is None or v.isdigit(), param, f"without a header columns are 0-based indices, got {v!r}")
    check(layout.pair != layout.text, "text_pair_column", f"must differ from the text column, both are {layout.text!r}")
    check(
        layout.label is None or layout.label not in (layout.text, layout.pair),
        "label_column",
        f"must differ from the text columns, got {layout.label!r}",
    )


def _fields(first: list[str] | dict | None) -> list[str]:
    """A tsv file's first line as fields (a tsv never yields a JSON object)."""
    return first if isinstance(first, list) else []


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


KIND = Classification()
