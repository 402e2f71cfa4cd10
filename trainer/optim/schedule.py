"""The learning-rate schedule of both commands: linear warm-up to the peak rate, then a decay to zero at
``total_steps``: linear, half a cosine (Hugging Face's ``cosine``), or warm-up-stable-decay (held at the peak
until the last 20% of the run, then linear). :class:`Schedule` is a run's, made once from its optimizer section:
the loops, the resume and the end-of-run warning ask it, not the flags (the warm-up note on the flags is
``TrainConfig.warmup_note``'s, the line of a decay re-planned on resume ``config.Steps.replanned``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from bertstream.trainer.optim.table import LR_SCHEDULES

# Warm-up-stable-decay: the share of the run, at its end, over which the rate falls linearly to zero (Hägele et
# al. 2024 found 20% to match a cosine schedule tuned to the run's length).
WSD_DECAY_SHARE = 0.2


class WarmupLinearDecay:
    """Multiplier of the peak rate: linear 0 -> 1 over ``warmup`` steps, then linear 1 -> 0 at ``total``;
    ``schedule="cosine"`` follows half a cosine from 1 to 0 at ``total`` instead (``0.5 * (1 + cos(pi * p))``,
    ``p`` the share of the decay done, as Hugging Face's ``get_cosine_schedule_with_warmup``);
    ``schedule="wsd"`` (warm-up-stable-decay) holds the peak until the last ``WSD_DECAY_SHARE`` of the run and
    decays linearly to 0 at ``total`` over it.

    A class, not a lambda: LambdaLR's ``state_dict`` then records its fields, and the rate is a function of the
    step alone, so a resumed run continues the same curve (the schedule is a flag a resume must keep).
    """

    def __init__(self, warmup: int, total: int, schedule: str = "linear") -> None:
        if schedule not in LR_SCHEDULES:
            raise ValueError(f"schedule must be one of {LR_SCHEDULES}, got {schedule!r}")
        self.warmup = max(0, warmup)
        self.total = max(total, self.warmup + 1)
        self.schedule = schedule

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        decay_start = self.warmup
        if self.schedule == "wsd":
            decay_start = max(self.warmup, self.total - round(WSD_DECAY_SHARE * self.total))
        if step < decay_start:
            return 1.0
        left = max(0.0, (self.total - step) / max(1, self.total - decay_start))  # 1 -> 0 over the decay
        if self.schedule == "cosine":
            return 0.5 * (1.0 - math.cos(math.pi * left))  # = 0.5 * (1 + cos(pi * (1 - left)))
        return left


def build_scheduler(optimizer: torch.optim.Optimizer, warmup: int, total: int, schedule: str = "linear") -> LambdaLR:
    return LambdaLR(optimizer, WarmupLinearDecay(warmup, total, schedule))


@dataclass(frozen=True, slots=True)
class Schedule:
    """A run's learning-rate schedule: ``warmup`` steps up to the peak rate, the decay of ``shape`` (``--lr-schedule``)
    to 0 at step ``total``. Made once from the optimizer section (the warm-up settings are read here only)."""

    warmup: int
    total: int
    shape: str = "linear"

    @classmethod
    def pretraining(cls, optim: Any, max_steps: int) -> Schedule:
        """``--warmup-steps``, then the decay to ``--max-steps``."""
        return cls(optim.warmup_steps, max_steps, optim.lr_schedule)

    @classmethod
    def finetuning(cls, optim: Any, total_steps: int) -> Schedule:
        """``--warmup-ratio`` of the run's ``total_steps`` (``--max-steps``, or its epochs' steps)."""
        return cls(int(optim.warmup_ratio * total_steps), total_steps, optim.lr_schedule)

    def build(self, optimizer: torch.optim.Optimizer) -> LambdaLR:
        return build_scheduler(optimizer, self.warmup, self.total, self.shape)

    def never_peaked(self, step: int) -> str:
        """A clause for a warning at ``step``: the rate was still warming up there (empty when it was not)."""
        return f", with --warmup-steps {self.warmup} the rate was still warming up" if self.warmup >= step else ""
