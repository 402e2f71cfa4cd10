"""The optimizer table: every optimizer that ``berttrain pretrain`` and ``berttrain finetune`` build, by the name
``--optimizer`` takes, and the schedules ``--lr-schedule`` names (:mod:`bertstream.trainer.optim.schedule`).

- adamw: PyTorch's AdamW, fused on CUDA.
- lamb: LAMB (:mod:`bertstream.trainer.optim.lamb`), for very large batches.

Adding an optimizer: its module in this folder (a ``torch.optim.Optimizer``, which brings ``state_dict`` and
``load_state_dict``, so checkpoints and resume need nothing more) and a row in ``OPTIMIZERS``; both commands
offer it. Every optimizer gets the same parameter groups (:mod:`bertstream.trainer.optim.groups`), each with
its own rate and weight decay. This module imports no torch until an optimizer is built: ``--help`` reads the
table for the flag's choices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bertstream.trainer.optim.groups import param_groups

if TYPE_CHECKING:
    import torch
    from torch import nn

LR_SCHEDULES = ("linear", "cosine", "wsd")  # schedule.WarmupLinearDecay


@dataclass(frozen=True, slots=True)
class Settings:
    """What every optimizer of the table is built with, besides its parameter groups."""

    lr: float  # the default rate; each group carries its own (layer-wise decay)
    betas: tuple[float, float]
    eps: float
    on_cuda: bool


def _adamw(groups: list[dict], s: Settings) -> torch.optim.Optimizer:
    import torch

    return torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, eps=s.eps, fused=s.on_cuda or None)


def _lamb(groups: list[dict], s: Settings) -> torch.optim.Optimizer:
    from bertstream.trainer.optim.lamb import Lamb

    return Lamb(groups, lr=s.lr, betas=s.betas, eps=s.eps)


# name -> the optimizer over the groups. The first row is both commands' default.
OPTIMIZERS: dict[str, Callable[[list[dict], Settings], torch.optim.Optimizer]] = {
    "adamw": _adamw,
    "lamb": _lamb,
}


def build_optimizer(
    model: nn.Module,
    name: str,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    layer_decay: float = 1.0,
) -> torch.optim.Optimizer:
    """The table's optimizer ``name`` over ``model``'s parameter groups (no decay on biases and LayerNorm
    weights; ``layer_decay`` < 1: ELECTRA's layer-wise rates)."""
    build = OPTIMIZERS.get(name)
    if build is None:
        raise ValueError(f"optimizer must be one of {tuple(OPTIMIZERS)}, got {name!r}")
    groups = param_groups(model, weight_decay, layer_decay)
    for g in groups:  # a group's own rate (the schedule multiplies it)
        g["lr"] = lr * g.pop("lr_scale", 1.0)
    return build(groups, Settings(lr, betas, eps, on_cuda=next(model.parameters()).is_cuda))
