"""Configuration of the task pipelines: one frozen dataclass per task kind, validated on construction.

``TaskConfig`` holds what every task shares; ``ClassificationConfig``, ``NerConfig`` and ``SquadConfig`` add
their own fields. ``UsageError.param`` names the field, which the CLI maps to its flag.

The jobs (``ClassificationJob``, ``NerJob``, ``SquadJob``) are what a ``bertprep task`` command line says,
declared with :mod:`bertstream.cli.options` (its flags come from their fields); ``run_*`` derives the configs above
from a job and its inputs (the split from the file names, the casing from the tokenizer, GLUE's columns).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from bertstream.cli.errors import check
from bertstream.cli.options import opt, section
from bertstream.pipelines.common.formats import ARROW_COMPRESSIONS
from bertstream.pipelines.inputs.options import inputs_opt
from bertstream.pipelines.tasks.glue import NAMES as GLUE_NAMES
from bertstream.schemas import tasks as T

INPUT_FORMATS = ("tsv", "csv", "jsonl")
SCHEMES = ("iob2", "iob1")
MAX_SHARDS = 10_000
_SPLIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def parse_labels(text: str | None) -> tuple[str, ...]:
    """``--labels a,b,c`` -> ``("a", "b", "c")`` (order kept: it defines the ids)."""
    if not text:
        return ()
    labels = tuple(x.strip() for x in text.split(","))
    check(all(labels), "labels", f"empty label name in {text!r}")
    check(len(set(labels)) == len(labels), "labels", f"duplicate label name in {text!r}")
    return labels


def parse_articles(text: str | None) -> tuple[int, int | None] | None:
    """``START:END`` (either side may be empty) -> ``(start, end)``: a Python slice of article indices."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    check(m is not None, "articles", f"must be START:END with non-negative integers (e.g. 0:40), got {text!r}")
    assert m is not None  # for the type checker: check() raised otherwise
    start = int(m.group(1)) if m.group(1) else 0
    end = int(m.group(2)) if m.group(2) else None
    check(end is None or end > start, "articles", f"END must be greater than START, got {text!r}")
    return start, end


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskConfig:
    """What every task shares. ``split`` names the data (``train``, ``dev``, ``dev_matched``, ...);
    ``training`` says whether it is a training split (labels outside a fixed set are dropped, not fatal)."""

    kind: str
    split: str
    training: bool
    max_seq_length: int
    lowercase: bool = True
    labels: tuple[str, ...] = ()  # explicit label set (--labels); () = preset, manifest or derived
    num_shards: int = 0  # 0: from the input size (bertstream.pipelines.tasks.pipeline.SHARD_SIZING)
    arrow_compression: str = "zstd"
    arrow_batch_rows: int = 2048

    def __post_init__(self) -> None:
        check(self.kind in T.KINDS, "kind", f"must be one of {T.KINDS}, got {self.kind!r}")
        check(
            bool(_SPLIT.match(self.split)),
            "split",
            f"must be a plain name like train or dev_matched, got {self.split!r}",
        )
        check(8 <= self.max_seq_length <= 32767, "max_seq_length", f"must be in [8, 32767], got {self.max_seq_length}")
        check(
            0 <= self.num_shards <= MAX_SHARDS,
            "num_shards",
            f"must be in [1, {MAX_SHARDS}] (0 = auto), got {self.num_shards}",
        )
        check(len(set(self.labels)) == len(self.labels), "labels", f"duplicate label names in {list(self.labels)}")
        check(len(self.labels) <= 32767, "labels", f"at most 32767 labels, got {len(self.labels)}")
        check(
            self.arrow_compression in ARROW_COMPRESSIONS,
            "arrow_compression",
            f"must be one of {ARROW_COMPRESSIONS}, got {self.arrow_compression!r}",
        )
        check(self.arrow_batch_rows >= 1, "arrow_batch_rows", f"must be >= 1, got {self.arrow_batch_rows}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["labels"] = list(self.labels)
        return d

    def shard_parameters(self) -> dict[str, Any]:
        """Parameters that shape the rows (stored in every shard's schema metadata); not how they are stored."""
        d = self.to_dict()
        for k in ("num_shards", "arrow_compression", "arrow_batch_rows"):
            d.pop(k)
        return d


@dataclass(frozen=True, kw_only=True, slots=True)
class ClassificationConfig(TaskConfig):
    """Columns are header names, or 0-based indices (as strings of digits) for files without a header."""

    input_format: str = "tsv"
    header: bool = True
    text_column: str = ""
    text_pair_column: str | None = None
    label_column: str | None = None  # None: unlabeled (test files)
    glue: str | None = None

    def __post_init__(self) -> None:
        TaskConfig.__post_init__(self)
        check(
            self.kind in (T.CLASSIFICATION, T.REGRESSION),
            "kind",
            f"must be classification or regression, got {self.kind!r}",
        )
        check(
            self.input_format in INPUT_FORMATS,
            "input_format",
            f"must be one of {INPUT_FORMATS}, got {self.input_format!r}",
        )
        check(bool(self.text_column), "text_column", "is required (a column name, or an index without a header)")
        check(
            self.max_seq_length >= (5 if self.text_pair_column else 3) + 1,
            "max_seq_length",
            f"too small for [CLS] A [SEP] B [SEP], got {self.max_seq_length}",
        )
        check(not (self.kind == T.REGRESSION and self.labels), "labels", "a regression task has no label set")
        if self.input_format == "jsonl":
            check(self.header, "header", "JSON lines have named fields; --no-header applies to tsv/csv")
        elif not self.header:
            for param in ("text_column", "text_pair_column", "label_column"):
                v = getattr(self, param)
                check(v is None or v.isdigit(), param, f"without a header columns are 0-based indices, got {v!r}")
        check(
            self.text_pair_column != self.text_column,
            "text_pair_column",
            f"must differ from the text column, both are {self.text_column!r}",
        )
        check(
            self.label_column is None or self.label_column not in (self.text_column, self.text_pair_column),
            "label_column",
            f"must differ from the text columns, got {self.label_column!r}",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class NerConfig(TaskConfig):
    scheme: str = "iob2"  # iob1 input is converted to IOB2
    window_overlap: int = 16  # words shared by consecutive windows of a long sentence

    def __post_init__(self) -> None:
        TaskConfig.__post_init__(self)
        check(self.kind == T.NER, "kind", f"must be ner, got {self.kind!r}")
        check(self.scheme in SCHEMES, "scheme", f"must be one of {SCHEMES}, got {self.scheme!r}")
        check(
            0 <= self.window_overlap <= (self.max_seq_length - 2) // 2,
            "window_overlap",
            f"must be in [0, (max_seq_length - 2) // 2 = {(self.max_seq_length - 2) // 2}], got {self.window_overlap}",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class SquadConfig(TaskConfig):
    doc_stride: int = 128  # tokens between the starts of consecutive context windows
    max_query_length: int = 64
    articles: tuple[int, int | None] | None = None  # slice of article indices in each input file

    def __post_init__(self) -> None:
        TaskConfig.__post_init__(self)
        check(self.kind == T.SQUAD, "kind", f"must be squad, got {self.kind!r}")
        check(not self.labels, "labels", "SQuAD has no label set")
        check(
            1 <= self.max_query_length <= self.max_seq_length - 4,
            "max_query_length",
            f"must be in [1, max_seq_length - 4 = {self.max_seq_length - 4}], got {self.max_query_length}",
        )
        context = self.max_seq_length - self.max_query_length - 3
        check(
            1 <= self.doc_stride <= context,
            "doc_stride",
            f"must be in [1, max_seq_length - max_query_length - 3 = {context}], got {self.doc_stride}",
        )
        if self.articles is not None:
            start, end = self.articles
            check(start >= 0 and (end is None or end > start), "articles", f"bad article range {self.articles}")

    def to_dict(self) -> dict[str, Any]:
        d = TaskConfig.to_dict(self)
        d["articles"] = None if self.articles is None else list(self.articles)
        return d


# ----------------------------------------------------------------------------------------- the jobs


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskIO:
    """What every task command reads and writes."""

    inputs: tuple[str, ...] = inputs_opt()
    vocab: str = opt(help="The checkpoint's vocab.txt or tokenizer.json (local or URL).")
    output: str = opt(help="Output folder (local or URL).")
    split: str | None = opt(
        None,
        "Split name (train, dev, dev_matched, test, ...); default: from the file names. "
        "Splits named train* are training splits.",
    )
    lowercase: bool | None = opt(
        None, "Casing (default: from tokenizer.json; lowercase for vocab.txt).", flag="--lowercase/--cased"
    )
    num_shards: int = opt(0, "Arrow shards (default: 1-4 from the input size).")
    overwrite: bool = opt(False, "Replace a dataset already in --output.")
    beam_args: tuple[str, ...] = opt((), cli=False)  # any other --option: Beam pipeline options


@dataclass(frozen=True, kw_only=True, slots=True)
class LabelSource:
    """Where a classification or NER task's label set comes from (else: a preset, or the training data)."""

    labels: tuple[str, ...] = opt(
        (),
        "Label set a,b,... (order = ids). Training rows with other labels are dropped and counted.",
        convert=parse_labels,
    )
    label_set_from: str | None = opt(
        None, "Training dataset folder whose manifest gives the label names and ids (evaluation splits)."
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ClassificationJob:
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


@dataclass(frozen=True, kw_only=True, slots=True)
class NerJob:
    io: TaskIO = section(TaskIO)
    scheme: str = opt("iob2", "Tagging scheme of the input (iob1 is converted to IOB2).", choices=SCHEMES, show=True)
    window_overlap: int = opt(
        16, "Words shared by consecutive windows of a sentence longer than --max-seq-length.", show=True
    )
    input_format: str = opt(
        "conll",
        "conll: 'token POS chunk TAG' lines; char-tag: 'char TAG' lines (Chinese NER, e.g. People's Daily).",
        flag="--format",
        choices=("conll", "char-tag"),
        show=True,
    )
    label_source: LabelSource = section(LabelSource)
    max_seq_length: int = opt(128, show=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class SquadJob:
    io: TaskIO = section(TaskIO)
    max_seq_length: int = opt(384, show=True)
    doc_stride: int = opt(128, "Tokens between context window starts.", show=True)
    max_query_length: int = opt(64, show=True)
    articles: tuple[int, int | None] | None = opt(
        None, "START:END: only these articles (by index) of each file, e.g. 0:40.", convert=parse_articles
    )
