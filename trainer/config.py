"""Configuration of a pretraining run: one frozen dataclass, validated on construction, saved with every
checkpoint. CLI flags override these defaults; model presets live in ``trainer.model``."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from trainer.data.config import MASKING_MODES, dataset_key, split_data_args

PRECISIONS = ("auto", "fp32", "bf16")
OPTIMIZERS = ("adamw", "lamb")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


class TrainConfigError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def check(ok: bool, param: str, message: str) -> None:
    """Config validation: raise ``TrainConfigError(param, message)`` unless ``ok``."""
    if not ok:
        raise TrainConfigError(param, message)


def check_device(device: str) -> None:
    """``--device``: only what the trainer can run on (another name must not silently fall back to the CPU)."""
    check(
        isinstance(device, str) and _DEVICE.fullmatch(device) is not None,
        "device",
        f"must be auto, cpu, cuda or cuda:N, got {device!r}",
    )


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    data: tuple[str, ...]
    output: str
    eval_data: str | None = None
    data_format: str = "auto"
    model: str = "tiny"
    model_config: str | None = None  # JSON file of BertConfig fields (overrides the preset)
    init_from: str | None = None  # a Hugging Face BERT folder
    dropout: float | None = None  # hidden and attention dropout; None: the preset's (0.1)
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 1e-4
    warmup_steps: int = 1000
    max_steps: int = 10_000
    max_minutes: float = 0.0  # > 0: stop (evaluate, checkpoint) once this much wall time has passed
    optimizer: str = "adamw"
    weight_decay: float = 0.01
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0
    precision: str = "auto"
    compile: bool = False
    seed: int = 0
    log_every: int = 10
    eval_every: int = 500
    eval_batches: int = 50
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    resume: str = "auto"  # auto | none | PATH of a checkpoint folder
    overwrite: bool = False  # clear a non-empty --output whole instead of refusing it
    reset_optimizer: bool = False  # with --resume PATH: weights only (two-phase training)
    num_workers: int = 2
    shuffle_buffer: int = 10_000
    skip_corrupt: bool = False
    deterministic: bool = False
    tensorboard: bool = True
    device: str = "auto"
    masking: str = "static"  # static: the shards' masks; dynamic: fresh masks per (seed, epoch, instance)
    mlm_probability: float = 0.15  # dynamic masking only
    max_predictions: int | None = None  # dynamic masking only; None: no cap beyond the count rule
    whole_word_mask: bool = False  # dynamic masking only
    no_nsp: bool = False  # MLM only: NSP labels ignored, its loss neither computed nor reported

    def __post_init__(self) -> None:
        check(len(self.data) > 0, "data", "at least one --data DIR is required")
        try:
            paths = self.data_paths
        except ValueError as e:
            raise TrainConfigError("data", str(e)) from None
        keys = [dataset_key(d) for d in paths]
        twice = sorted({d for d, k in zip(paths, keys) if keys.count(k) > 1})
        check(not twice, "data", f"the same dataset is given more than once: {', '.join(twice)}")
        check(
            "://" not in self.output,
            "output",
            f"{self.output}: the run folder must be local (checkpoints are "
            "written to a temporary folder and renamed, which object stores cannot do); --data may be s3://...",
        )
        for name in ("batch_size", "grad_accum", "max_steps", "log_every", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            check(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value!r}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(self.max_minutes >= 0, "max_minutes", f"must be >= 0, got {self.max_minutes}")
        check(self.warmup_steps >= 0, "warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        check(0 <= self.weight_decay < 1, "weight_decay", f"must be in [0, 1), got {self.weight_decay}")
        check(self.max_grad_norm > 0, "max_grad_norm", f"must be > 0, got {self.max_grad_norm}")
        check(self.optimizer in OPTIMIZERS, "optimizer", f"must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        check(self.precision in PRECISIONS, "precision", f"must be one of {PRECISIONS}, got {self.precision!r}")
        check(self.keep_checkpoints >= 1, "keep_checkpoints", f"must be >= 1, got {self.keep_checkpoints}")
        check(self.eval_batches >= 1, "eval_batches", f"must be >= 1, got {self.eval_batches}")
        check(self.num_workers >= 0, "num_workers", f"must be >= 0, got {self.num_workers}")
        check(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        check(self.dropout is None or 0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        check_device(self.device)
        check(self.masking in MASKING_MODES, "masking", f"must be one of {MASKING_MODES}, got {self.masking!r}")
        check(0 < self.mlm_probability < 1, "mlm_probability", f"must be in (0, 1), got {self.mlm_probability}")
        check(
            self.max_predictions is None or self.max_predictions >= 1,
            "max_predictions",
            f"must be >= 1, got {self.max_predictions}",
        )
        for name, default in (("mlm_probability", 0.15), ("max_predictions", None), ("whole_word_mask", False)):
            check(
                self.masking == "dynamic" or getattr(self, name) == default,
                name,
                "needs --masking dynamic (static masks are read from the shards as written)",
            )
        check(
            not (self.reset_optimizer and self.resume in ("auto", "none")),
            "reset_optimizer",
            "needs --resume PATH (the checkpoint whose weights start the new phase)",
        )

    @property
    def data_paths(self) -> tuple[str, ...]:
        """The ``--data`` folders, without their weights."""
        return split_data_args(self.data)[0]

    @property
    def data_weights(self) -> tuple[float, ...] | None:
        """The ``--data DIR:WEIGHT`` weights, or None (bare folders are read as one dataset)."""
        return split_data_args(self.data)[1]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["data"] = list(self.data)
        return d
