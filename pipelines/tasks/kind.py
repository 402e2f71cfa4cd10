"""What a task kind is, and the settings every kind shares.

A task kind (``bertprep task NAME``) is one ``TaskKind`` object in its own room (``classification/``, ``ner/``,
``squad/``), as the trainer's ``Task`` objects are: it owns its settings (its job, whose fields are the command's
flags: declared once, validated on construction), and turns them and the resolved inputs into a ``Plan``: the
parser, the featurizer, the label plan, what its label means (``LabelMeaning``: the shared writer and finaliser
read it there, not from the column's type), its parameters and manifest entries; and it writes the files it keeps
beside the shards. The stages and the run (``bertstream.pipelines.tasks.pipeline.run_task``) ask the kind and
never branch on it; the table of kinds (``bertstream.pipelines.tasks.kinds``) registers the commands.

``TaskIO`` and ``LabelSource`` are the sections every job (or every labelled one) holds; ``TaskConfig`` is what a
run resolves from them and its inputs (split, casing); ``UsageError.param`` names the field, which the CLI maps to
its flag. Nothing here imports Beam: the command line reads the jobs at start-up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from bertstream.cli.errors import check
from bertstream.cli.options import opt
from bertstream.pipelines.common.formats import ARROW_COMPRESSIONS
from bertstream.pipelines.inputs.options import inputs_opt
from bertstream.schemas import tasks as T

if TYPE_CHECKING:
    from bertstream.pipelines.inputs.resolve import InputFile
    from bertstream.pipelines.tokenizer.load import TokenizerSpec

MAX_SHARDS = 10_000
MAX_LABELS = 32_767  # a label id is int16 in the task schemas (classification and NER rows)
_SPLIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def parse_labels(text: str | None) -> tuple[str, ...]:
    """``--labels a,b,c`` -> ``("a", "b", "c")`` (order kept: it defines the ids); None: not given. ``--labels ''``
    is refused (it read as no --labels: the label set was then taken from the data, unasked)."""
    if text is None:
        return ()
    check(bool(text.strip()), "labels", "an empty label set: give the labels as a,b,... or leave --labels out")
    labels = tuple(x.strip() for x in text.split(","))
    check(all(labels), "labels", f"empty label name in {text!r}")
    check(len(set(labels)) == len(labels), "labels", f"duplicate label name in {text!r}")
    return labels


def check_max_seq_length(max_seq_length: int) -> None:
    check(8 <= max_seq_length <= 32767, "max_seq_length", f"must be in [8, 32767], got {max_seq_length}")


def is_training(split: str) -> bool:
    return split.startswith("train")


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskConfig:
    """What every run shares, resolved from its job and inputs. ``split`` names the data (``train``, ``dev``,
    ``dev_matched``, ...); ``training`` says whether it is a training split (labels outside a fixed set are
    dropped, not fatal). ``kind`` is the schema's kind (a classification run writes ``regression`` rows for
    float labels)."""

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
        check(T.is_kind_name(self.kind), "kind", f"must be a lower-case name like ner, got {self.kind!r}")
        check(
            bool(_SPLIT.match(self.split)),
            "split",
            f"must be a plain name like train or dev_matched, got {self.split!r}",
        )
        check_max_seq_length(self.max_seq_length)
        check(
            0 <= self.num_shards <= MAX_SHARDS,
            "num_shards",
            f"must be in [1, {MAX_SHARDS}] (0 = auto), got {self.num_shards}",
        )
        check(len(set(self.labels)) == len(self.labels), "labels", f"duplicate label names in {list(self.labels)}")
        check(len(self.labels) <= MAX_LABELS, "labels", f"at most {MAX_LABELS} labels, got {len(self.labels)}")
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


# ----------------------------------------------------------------------------------------- the jobs' sections


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
    max_rows: int = opt(
        0,
        "> 0: keep only the first N records of the split (rows; NER: sentences; SQuAD: examples), in input order; "
        "the rest are counted as beyond --max-rows, not dropped. 0: all.",
    )
    overwrite: bool = opt(False, "Replace a dataset already in --output.")
    beam_args: tuple[str, ...] = opt((), cli=False)  # any other --option: Beam pipeline options

    def __post_init__(self) -> None:
        check(isinstance(self.max_rows, int) and self.max_rows >= 0, "max_rows", f"must be >= 0, got {self.max_rows!r}")


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


# ----------------------------------------------------------------------------------------- a kind and its plan


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the run resolves before the kind plans: runner options, input files, tokenizer, split."""

    options: Any
    files: list[InputFile]
    spec: TokenizerSpec
    split: str

    def config(self, kind: str, io: TaskIO, max_seq_length: int, labels: tuple[str, ...] = ()) -> TaskConfig:
        """The run's shared settings for rows of ``kind``."""
        return TaskConfig(
            kind=kind,
            split=self.split,
            training=is_training(self.split),
            max_seq_length=max_seq_length,
            lowercase=self.spec.lowercase,
            labels=tuple(labels),
            num_shards=io.num_shards,
        )


@dataclass(frozen=True, slots=True)
class LabelPlan:
    """Where a run's label set comes from (``bertstream.pipelines.tasks.labels``): the set, or None to derive it."""

    labels: tuple[str, ...] | None  # None: derive from the data
    source: str
    always: tuple[str, ...] = ()  # labels every set of the kind holds (NER's "O"): a derived set gets them

    @property
    def derived(self) -> bool:
        return self.labels is None


NO_LABELS = LabelPlan((), "none")  # regression, SQuAD, and unlabeled splits without a given set


@dataclass(frozen=True, slots=True)
class LabelMeaning:
    """What a row's label is, as its kind declares it: the shared stages (``write``, ``finalize``) read it from
    here, never from its column's type. ``counted``: one id per row, whose rows the statistics count
    (``label_counts``); ``named``: that id indexes the run's label names (the counts are shown by name), else
    it is shown as it is (a choice's index)."""

    what: str  # in words, for the guide and messages
    column: str | None  # the row column holding it; None: several (a span's start and end)
    counted: bool = False
    named: bool = False

    def __post_init__(self) -> None:
        if self.counted and self.column is None:
            raise ValueError(f"a counted label ({self.what}) needs its column")

    def shown(self, counts: dict[str, int], labels: list[str]) -> dict[str, int]:
        """``counts`` by id as the manifest shows them: by label name when the id names one."""
        return {labels[int(k)]: v for k, v in counts.items()} if self.named else dict(counts)


CLASS_INDEX = LabelMeaning("a class: an index into the label names", T.LABEL, counted=True, named=True)
VALUE = LabelMeaning("a value (regression)", T.LABEL)
TAG_PER_TOKEN = LabelMeaning("a tag id per token (-100: none)", T.LABELS)
ANSWER_SPAN = LabelMeaning("an answer span: its start and end tokens", None)


@dataclass(frozen=True, slots=True)
class Plan:
    """A kind's run: what the stages run and what the manifest says beyond the shared entries."""

    cfg: TaskConfig
    parser: Callable  # bertstream.pipelines.tasks.read.Parser: (path, file_index, tally) -> records
    featurizer: Callable  # () -> bertstream.pipelines.tasks.features.Featurizer, built once per worker
    labels: LabelPlan
    parameters: dict[str, Any]  # the kind's settings as resolved: manifest and shard parameters after cfg's
    task: dict[str, Any]  # the manifest's task entries of the kind
    label: LabelMeaning  # what the rows' label is (CLASS_INDEX, VALUE, TAG_PER_TOKEN, ANSWER_SPAN or the kind's own)
    # (a row of several sequences: its layout says which column holds their lengths, ``Layout.sequences``)
    label_set_from: str | None = None


class TaskKind:
    """The interface; each room's kind fills in each part."""

    name: ClassVar[str]  # the command: bertprep task NAME
    # The kinds of rows it writes (the manifest's and the shards' kind: ``cfg.kind``), each with the layout of the
    # contract its rows fit (``bertstream.schemas.tasks.LAYOUTS``); most write one, named as the command.
    layouts: ClassVar[dict[str, T.RowLayout]]
    unit: ClassVar[str]  # what one input record is (rows, sentences, examples): counted as <unit>_read, _used, ...
    summary: ClassVar[str]  # the first paragraph of its --help
    job: ClassVar[type]  # its settings, one frozen dataclass: the fields are the command's flags
    files: ClassVar[tuple[str, ...]] = ()  # files it writes beside the shards (and their .tmp while written)

    def plan(self, job: Any, got: Inputs) -> Plan:
        """Check the job against its inputs (before Beam starts) and plan the run."""
        raise NotImplementedError

    def write_files(self, records: Any, output_dir: str, layout: Any) -> Any:
        """``PCollection[list[file info]]``: the files beside the shards, from the records (``RecordBatch``) and
        their ``Layout``; None when the kind writes none."""
        return None
