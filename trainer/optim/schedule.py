"""The learning-rate schedule of both commands: linear warm-up to the peak rate, then a decay to zero at
``total_steps``: linear, half a cosine (Hugging Face's ``cosine``), or warm-up-stable-decay (held at the peak
until the last 20% of the run, then linear)."""

from __future__ import annotations

import math

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


def warmup_note(warmup: int, total: int) -> str | None:
    """One line when the warm-up does not end before the run does: the rate never gets to ``--lr`` (a 30-step
    trial under the default 1,000 warm-up steps trains at 3% of it and looks as if it learned nothing). A warning,
    not a rescaled warm-up: the flag keeps its meaning, and a resumed run its schedule."""
    if total <= 0 or warmup < total:
        return None
    return (
        f"warning: --warmup-steps {warmup} >= --max-steps {total}: the whole run is warm-up, the learning rate "
        f"reaches {total / warmup:.0%} of --lr and never decays (a tenth of the run: --warmup-steps {max(1, total // 10)})"
    )


def build_scheduler(optimizer: torch.optim.Optimizer, warmup: int, total: int, schedule: str = "linear") -> LambdaLR:
    return LambdaLR(optimizer, WarmupLinearDecay(warmup, total, schedule))
