"""The optimizer table: every optimizer that ``berttrain pretrain`` and ``berttrain finetune`` build, by the name
``--optimizer`` takes, and the schedules ``--lr-schedule`` names (:mod:`bertstream.trainer.optim.schedule`).

- adamw: PyTorch's AdamW, fused (CUDA and CPU).
- lamb: LAMB (:mod:`bertstream.trainer.optim.lamb`), for very large batches.

Adding an optimizer: its module in this folder (a ``torch.optim.Optimizer``, which brings ``state_dict`` and
``load_state_dict``, so checkpoints and resume need nothing more) and a row in ``OPTIMIZERS``; both commands
offer it. Its ``step`` must honour a ``found_inf`` attribute (a float 0-dim tensor on the device, 1: leave
parameters and state as they were), as fused AdamW and LAMB do: a step whose gradient is not finite is skipped
on the device, never read on the host (``training.Training.optimizer_step``). Every optimizer gets the same parameter groups (:mod:`bertstream.trainer.optim.groups`), each with
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

    # fused on every device (CPU too): the one AdamW of PyTorch that honours found_inf, the skipped step
    return torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, eps=s.eps, fused=True)


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
    optimizer = build(groups, Settings(lr, betas, eps, on_cuda=next(model.parameters()).is_cuda))
    keep_real_rows(optimizer, model)
    return optimizer


def keep_real_rows(optimizer: torch.optim.Optimizer, model: nn.Module) -> None:
    """The state of a parameter padded with rows the model never uses (a module's ``padded_parameters``: name ->
    real rows, the vocabulary's, see ``embeddings.pad_vocab``) saved at its real rows and padded again (zeros) when
    loaded, as the model's weights are: optimizer.pt keeps the real size, so checkpoints of before still resume."""
    real = {
        id(m.get_parameter(name)): rows
        for m in model.modules()
        for name, rows in getattr(m, "padded_parameters", {}).items()
    }

    def padded(opt: torch.optim.Optimizer) -> dict[int, tuple[int, tuple[int, ...]]]:
        """Index in the state dict -> (real rows, padded shape) of the padded parameters."""
        params = [p for g in opt.param_groups for p in g["params"]]
        return {i: (real[id(p)], tuple(p.shape)) for i, p in enumerate(params) if id(p) in real}

    def save(opt: torch.optim.Optimizer, state: dict) -> dict:
        for i, (rows, shape) in padded(opt).items():
            if i in state["state"]:  # a new dict: the one state_dict gave is the optimizer's own
                state["state"][i] = {k: _rows(v, shape, rows) for k, v in state["state"][i].items()}
        return state

    def load(opt: torch.optim.Optimizer, state: dict) -> dict:
        import torch

        inner = dict(state.get("state", {}))
        for i, (rows, shape) in padded(opt).items():
            entry = inner.get(i)
            if not isinstance(entry, dict):
                continue
            inner[i] = {
                k: torch.cat((v, v.new_zeros((shape[0] - rows, *v.shape[1:]))))
                if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == rows and shape[0] > rows
                else v
                for k, v in entry.items()
            }
        return {**state, "state": inner}

    optimizer.register_state_dict_post_hook(save)
    optimizer.register_load_state_dict_pre_hook(load)


def _rows(value: object, shape: tuple[int, ...], rows: int) -> object:
    dims = getattr(value, "shape", None)
    return value[:rows] if dims is not None and tuple(dims) == shape else value  # type: ignore[index]
