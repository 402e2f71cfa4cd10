"""Configuration of a fine-tuning run: one frozen dataclass, validated on construction, saved in results.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from schemas import tasks as T
from trainer.config import PRECISIONS, check, check_device

TASKS = T.KINDS  # classification, regression, ner, squad


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig:
    task: str
    train_data: str
    eval_data: str
    init: str  # our checkpoint folder (or run folder), a Hugging Face BERT folder, or random:PRESET
    output: str
    epochs: int = 3
    dropout: float | None = None  # hidden and attention dropout; None: the init's (0.1 for random:PRESET)
    lr: float = 5e-5
    batch_size: int = 32  # per rank
    eval_batch_size: int = 0  # 0: 2 * batch_size
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    adam_eps: float = 1e-6  # BERT's
    max_grad_norm: float = 1.0
    max_steps: int = 0  # > 0: train exactly this many steps (epochs follow), as Hugging Face's --max_steps
    seed: int = 0
    precision: str = "auto"
    num_workers: int = 0  # task data is in memory: collation is cheap
    log_every: int = 50
    max_answer_length: int = 30  # SQuAD: longest predicted span, in tokens
    n_best: int = 20  # SQuAD: start and end candidates per window
    tensorboard: bool = True
    device: str = "auto"
    resume: str = "none"  # auto: continue the run in output from its latest epoch (none: refuse a used folder)

    def __post_init__(self) -> None:
        check(self.task in TASKS, "task", f"must be one of {TASKS}, got {self.task!r}")
        for name in ("train_data", "eval_data", "init", "output"):
            check(bool(getattr(self, name)), name, "is required")
        check(
            "://" not in self.output,
            "output",
            f"{self.output}: the run folder must be local (checkpoints and "
            "predictions are written to local files); --train-data and --eval-data may be s3://...",
        )
        for name in ("epochs", "batch_size", "log_every", "max_answer_length", "n_best"):
            value = getattr(self, name)
            check(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value!r}")
        for name in ("eval_batch_size", "max_steps", "num_workers", "seed"):
            value = getattr(self, name)
            check(isinstance(value, int) and value >= 0, name, f"must be an integer >= 0, got {value!r}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(self.dropout is None or 0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        check(0 <= self.warmup_ratio < 1, "warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        check(0 <= self.weight_decay < 1, "weight_decay", f"must be in [0, 1), got {self.weight_decay}")
        check(self.adam_eps > 0, "adam_eps", f"must be > 0, got {self.adam_eps}")
        check(self.max_grad_norm > 0, "max_grad_norm", f"must be > 0, got {self.max_grad_norm}")
        check(self.precision in PRECISIONS, "precision", f"must be one of {PRECISIONS}, got {self.precision!r}")
        check_device(self.device)
        check(self.resume in ("auto", "none"), "resume", f"must be auto or none, got {self.resume!r}")

    @property
    def eval_batch(self) -> int:
        return self.eval_batch_size or 2 * self.batch_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
