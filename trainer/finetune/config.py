"""Configuration of a fine-tuning run: frozen sections, validated on construction, saved in results.json. The
optimiser and run sections are pretraining's (``bertstream.trainer.config``), with fine-tuning's defaults given here."""

from __future__ import annotations

from dataclasses import MISSING, dataclass
from typing import TYPE_CHECKING, Any

from bertstream.cli import options
from bertstream.cli.errors import check
from bertstream.cli.options import FIXED, opt, section
from bertstream.trainer.checks import check_finite, check_ints
from bertstream.trainer.config import DeviceBatch, OptimConfig, RunConfig, Steps
from bertstream.trainer.data.config import EvalSet, Workers
from bertstream.trainer.finetune.tasks import TASKS as _TASKS
from bertstream.trainer.finetune.tasks import Task
from bertstream.trainer.init_choice import InitChoice
from bertstream.trainer.model_config import BertConfig, with_dropout
from bertstream.trainer.optim.advice import LAYER_DECAY_HELP
from bertstream.trainer.pooling import SENTENCE_HEAD, Pooling
from bertstream.trainer.run_folder import CONTINUED_OR_NOT, FINETUNING_HELP, NONE, RunFolder

if TYPE_CHECKING:
    from torch import nn

TASKS = tuple(_TASKS)  # the kinds' Tasks, in their table's order: classification, regression, ner, squad


@dataclass(frozen=True, slots=True, kw_only=True)
class FinetuneOptim(OptimConfig):
    warmup_ratio: float = opt(0.1, "Linear warmup over this fraction of all steps.", tags=(FIXED,))

    layer_decay: float = opt(1.0, LAYER_DECAY_HELP, tags=(FIXED,))

    def __post_init__(self) -> None:
        OptimConfig.__post_init__(self)  # (zero-argument super() fails in slotted dataclasses on 3.11)
        check(0 <= self.warmup_ratio < 1, "warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        check(0 < self.layer_decay <= 1, "layer_decay", f"must be in (0, 1], got {self.layer_decay}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FinetuneConfig:
    # FIXED: the settings a resume keeps (they shape the trajectory; run-time flags may change)
    task: str = opt(help="Task kind; must match the datasets' manifests.", choices=TASKS, tags=(FIXED,))
    train_data: str = opt(help="Training task dataset folder (bertprep task; local or URL).", tags=(FIXED,))
    eval_set: EvalSet = section(
        EvalSet,
        help={"eval_data": "Evaluation task dataset folder (same vocab and label list)."},
        tags={"eval_data": (FIXED,)},
        eval_data=MISSING,
    )
    starting: InitChoice = section(
        InitChoice,
        help={
            "init": "Our checkpoint folder (or run folder: its newest checkpoint), a Hugging Face BERT folder, "
            "random:PRESET (tiny, mini, small, medium, base, large) over the data's vocabulary, or "
            "random:CHECKPOINT (that checkpoint's architecture, freshly initialised)."
        },
    )
    # --output, --resume (auto or none, none by default), --overwrite: the run folder's section, as pretraining's
    run_folder: RunFolder = section(
        RunFolder,
        help=FINETUNING_HELP,
        after={"resume": "threads", "overwrite": "dist_timeout"},
        choices={"resume": CONTINUED_OR_NOT},
        resume=NONE,
    )
    run: RunConfig = section(RunConfig, log_every=50, after={"dist_timeout": "n_best", "device": "report_to"})
    epochs: int = opt(3, tags=(FIXED,))
    dropout: float | None = opt(None, "Hidden and attention dropout (default: the init's own setting).", tags=(FIXED,))
    pooled: Pooling = section(
        Pooling,
        help={
            "pooling": "Sentence heads (classification, regression): cls, the pooler on [CLS] as BERT and Hugging "
            "Face; mean, the mean of the last layer over the real tokens (the pooler is unused: an MLM-only "
            "(--no-nsp) checkpoint never trained it)."
        },
        choices={"pooling": SENTENCE_HEAD},
    )
    batch: DeviceBatch = section(
        DeviceBatch, help={"batch_size": "Rows per device and batch."}, tags={"batch_size": (FIXED,)}
    )
    grad_accum: int = opt(
        1,
        "Batches per optimizer step (gradient accumulation): a step reads --batch-size x --grad-accum rows a process.",
        tags=(FIXED,),
    )
    eval_batch_size: int = opt(0, "0: twice --batch-size.")
    optim: FinetuneOptim = section(FinetuneOptim, lr=5e-5)
    max_steps: int = opt(0, "> 0: train this many steps (overrides --epochs).", tags=(FIXED,))  # as HF's --max_steps
    eval_every: int = opt(
        0,
        "> 0: also evaluate every this many optimizer steps inside an epoch (each epoch's end is evaluated always).",
        tags=(FIXED,),
    )
    patience: int = opt(
        0,
        "> 0: stop early after this many evaluations in a row without a better primary dev metric (the best "
        "evaluation's weights are kept); said in the log and results.json. 0: train to the end.",
        tags=(FIXED,),
    )
    workers: Workers = section(Workers)  # task data is in memory
    label_names: str | None = opt(
        None,
        "LABEL=NAME,...: the names the export's id2label/label2id give the data's labels (SST-2: 0=negative,"
        "1=positive); labels not named keep their own. Default: the label set bertprep task recorded.",
    )
    max_answer_length: int = opt(30, "SQuAD: longest answer span in tokens.")
    n_best: int = opt(20, "SQuAD: start/end candidates per window.")

    def __post_init__(self) -> None:
        check(self.task in TASKS, "task", f"must be one of {TASKS}, got {self.task!r}")
        check(bool(self.train_data), "train_data", "is required")
        self.eval_set.require()  # (pretraining's may be left out)
        self.run_folder.refuse_remote(
            "checkpoints and predictions are written to local files", ("--train-data", self.eval_set.flag)
        )
        self.run_folder.refuse_checkpoint_path()
        check_ints(self, ("epochs", "grad_accum", "max_answer_length", "n_best"), 1)
        check_ints(self, ("eval_batch_size", "max_steps", "eval_every", "patience"), 0)
        check_finite(self)
        check(self.dropout is None or 0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        options.check_choices(self)  # (--pooling: a sentence head's, fewer than the section's)
        if self.label_names is not None:
            parse_label_names(self.label_names)

    def display_names(self, labels: tuple[str, ...]) -> list[str]:
        """The data's ``labels`` as the export names them (``--label-names``); a label it names that the data
        lacks is refused, naming the data's labels."""
        given = parse_label_names(self.label_names) if self.label_names else {}
        unknown = [k for k in given if k not in labels]
        check(
            not unknown,
            "label_names",
            f"names {', '.join(map(repr, unknown))}, not labels of the task data (its labels: {', '.join(labels) or 'none'})",
        )
        names = [given.get(label, label) for label in labels]
        check(len(set(names)) == len(names), "label_names", f"gives two labels one name: {names}")
        return names

    @property
    def task_kind(self) -> Task:
        """``--task`` as the kind's ``Task`` (``bertstream.trainer.finetune.tasks``): what the run asks of its kind."""
        return _TASKS[self.task]

    def trained(self, config: BertConfig) -> BertConfig:
        """The model configuration the run trains: the init's ``config`` with ``--dropout`` when given (the
        inputs take it from here; none reads the field)."""
        return with_dropout(config, self.dropout)

    def build_model(self, config: BertConfig, labels: tuple[str, ...]) -> nn.Module:
        """The task's model over ``labels``, its head new: pooled as ``--pooling`` asks, drawn from ``--seed``'s
        init stream."""
        pooling = self.pooled.pooling
        return self.task_kind.build_model(config, len(labels), seed=self.run.seeds.init, pooling=pooling)

    def head_for(self, labels: tuple[str, ...]) -> tuple[str, tuple[str, ...], str]:
        """``(kind, labels, pooling)``: what a trained head must have been trained for to be reused
        (``heads.reuse_head``)."""
        return self.task_kind.kind, labels, self.pooled.pooling

    @property
    def steps(self) -> FinetuneSteps:
        """``--batch-size``, ``--grad-accum``, ``--max-steps`` (0: the epochs') and ``--eval-every`` (0: the epochs'
        ends only) as what the run asks of them."""
        return FinetuneSteps(self.batch.batch_size, self.grad_accum, self.max_steps, self.eval_every)

    @property
    def eval_batch(self) -> int:
        return self.eval_batch_size or 2 * self.batch.batch_size

    @classmethod
    def build(cls, **values: Any) -> FinetuneConfig:
        """From flat settings named as the flags are (``FinetuneConfig.build(task=..., output=..., lr=...)``)."""
        return options.build(cls, **values)

    def to_dict(self) -> dict[str, Any]:
        return options.to_dict(self)


@dataclass(frozen=True, slots=True)
class FinetuneSteps(Steps):
    """Fine-tuning's :class:`Steps`: ``--max-steps`` 0 runs its ``--epochs``, ``--eval-every`` 0 evaluates at each
    epoch's end only; what its log and refusals say of them."""

    def until(self, epochs: int, per_epoch: int) -> int:
        """Fine-tuning's steps: ``--max-steps`` when given, else ``epochs`` of ``per_epoch`` steps."""
        return self.total or epochs * per_epoch

    def plan(self, epochs: int, per_epoch: int) -> str:
        """How long a fine-tuning run is, in the unit the user chose (--max-steps or --epochs)."""
        each = f" of {self.accum} batches (--grad-accum)" if self.accum > 1 else ""
        if self.total:
            return f"{self.total} steps{each} (--max-steps; an epoch is {per_epoch} steps)"
        return f"{epochs} epoch{'' if epochs == 1 else 's'} x {per_epoch} steps{each}"

    def cadence(self) -> str:
        """Why an evaluation inside an epoch happened (fine-tuning's log line)."""
        return f"--eval-every {self.eval_period}"


def parse_label_names(text: str) -> dict[str, str]:
    """``"0=negative,1=positive"`` -> ``{"0": "negative", "1": "positive"}``; a malformed part is refused."""
    out: dict[str, str] = {}
    for part in text.split(","):
        label, eq, name = part.partition("=")
        label, name = label.strip(), name.strip()
        check(
            bool(eq and label and name),
            "label_names",
            f"{part.strip()!r} is no LABEL=NAME (e.g. 0=negative,1=positive)",
        )
        check(label not in out, "label_names", f"names label {label!r} twice")
        out[label] = name
    return out
