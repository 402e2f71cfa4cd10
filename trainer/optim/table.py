"""The optimizer table: every optimizer that ``berttrain pretrain`` and ``berttrain finetune`` build, by the name
``--optimizer`` takes, and the schedules ``--lr-schedule`` names (:mod:`bertstream.trainer.optim.schedule`).

- adamw: PyTorch's AdamW, fused (CUDA and CPU).
- lamb: LAMB (:mod:`bertstream.trainer.optim.lamb`), for very large batches.

Adding an optimizer: its module in this folder (a ``torch.optim.Optimizer``, which brings ``state_dict`` and
``load_state_dict``, so checkpoints and resume need nothing more) and a row in ``OPTIMIZERS``; both commands
offer it. An optimizer's own settings (Adam's betas, SGD's momentum, Adafactor's decay) live in its row
(:class:`Row`'s ``own``, with their defaults): ``--optimizer-settings NAME=VALUE,...`` sets them, checked
against the row (:func:`own_settings`), and ``build`` reads them from ``Settings.own``. Its ``step`` must honour a ``found_inf`` attribute (a float 0-dim tensor on the device, 1: leave
parameters and state as they were), as fused AdamW and LAMB do: a step whose gradient is not finite is skipped
on the device, never read on the host (``training.Training.optimizer_step``). Every optimizer gets the same parameter groups (:mod:`bertstream.trainer.optim.groups`), each with
its own rate and weight decay. This module imports no torch until an optimizer is built: ``--help`` reads the
table for the flag's choices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bertstream.trainer.optim.groups import param_groups

if TYPE_CHECKING:
    import torch
    from torch import nn

LR_SCHEDULES = ("linear", "cosine", "wsd")  # schedule.WarmupLinearDecay


@dataclass(frozen=True, slots=True)
class Settings:
    """What every optimizer of the table is built with, besides its parameter groups."""

    lr: float  # the default rate; each group carries its own (layer-wise decay)
    eps: float
    on_cuda: bool
    own: Mapping[str, Any]  # the row's own settings: its defaults, with --optimizer-settings over them


@dataclass(frozen=True, slots=True)
class Row:
    """One optimizer: how it is built over the parameter groups, and its own settings with their defaults
    (a value given for one is read as its default's type)."""

    build: Callable[[list[dict], Settings], torch.optim.Optimizer]
    own: Mapping[str, float | int | bool] = field(default_factory=dict)


def _adamw(groups: list[dict], s: Settings) -> torch.optim.Optimizer:
    import torch

    # fused on every device (CPU too): the one AdamW of PyTorch that honours found_inf, the skipped step
    betas = (s.own["beta1"], s.own["beta2"])
    return torch.optim.AdamW(groups, lr=s.lr, betas=betas, eps=s.eps, fused=True)


def _lamb(groups: list[dict], s: Settings) -> torch.optim.Optimizer:
    from bertstream.trainer.optim.lamb import Lamb

    return Lamb(groups, lr=s.lr, betas=(s.own["beta1"], s.own["beta2"]), eps=s.eps)


_ADAM_BETAS = {"beta1": 0.9, "beta2": 0.999}  # the moments' decay rates

# name -> the optimizer over the groups and its own settings. The first row is both commands' default.
OPTIMIZERS: dict[str, Row] = {
    "adamw": Row(_adamw, _ADAM_BETAS),
    "lamb": Row(_lamb, _ADAM_BETAS),
}


def _own_help() -> str:
    rows = [f"{name}: " + ", ".join(f"{k} {v}" for k, v in row.own.items()) for name, row in OPTIMIZERS.items()]
    listed = "; ".join(r for r, row in zip(rows, OPTIMIZERS.values()) if row.own)
    return f"NAME=VALUE,...: the --optimizer's own settings, from its row of the table ({listed}); others keep theirs."


OWN_SETTINGS_HELP = _own_help()  # --optimizer-settings: each row's own settings and their defaults


def own_settings(name: str, text: str | None) -> dict[str, Any]:
    """The own settings of optimizer ``name``: its row's defaults with ``text`` (``NAME=VALUE,...``, as
    ``--optimizer-settings`` takes it) over them. A name the row lacks, or a value not of its default's type,
    is a ``ValueError`` naming it."""
    row = OPTIMIZERS[name]
    out = dict(row.own)
    given: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = (x.strip() for x in part.partition("="))
        if key not in row.own:
            has = f"its own are {', '.join(row.own)}" if row.own else "it has none"
            raise ValueError(f"{key!r} is no setting of --optimizer {name} ({has})")
        if not sep or not value:
            raise ValueError(f"{part.strip()!r}: give NAME=VALUE")
        if given.setdefault(key, value) != value:  # as a flag given twice: the last one won, silently
            raise ValueError(f"{key} is given twice ({given[key]}, {value}): give it once")
        out[key] = _typed(key, value, row.own[key])
        if key in _ADAM_BETAS and not 0.0 <= out[key] < 1.0:  # torch refused it only when building: a traceback
            raise ValueError(f"{key}={value}: a moment's decay rate must be in [0, 1)")
    return out


def _typed(key: str, value: str, default: float | int | bool) -> float | int | bool:
    import math

    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{key}={value}: must be true or false")
        return value.lower() == "true"
    try:
        number = int(value) if isinstance(default, int) else float(value)
    except ValueError:
        raise ValueError(f"{key}={value}: must be {type(default).__name__}") from None
    if not math.isfinite(number):
        raise ValueError(f"{key}={value}: must be a finite number")
    return number


def build_optimizer(
    model: nn.Module,
    name: str,
    lr: float,
    weight_decay: float,
    eps: float = 1e-6,
    layer_decay: float = 1.0,
    own: str | None = None,
) -> torch.optim.Optimizer:
    """The table's optimizer ``name`` over ``model``'s parameter groups (no decay on biases and LayerNorm
    weights; ``layer_decay`` < 1: ELECTRA's layer-wise rates), with its own settings ``own`` (``NAME=VALUE,...``:
    :func:`own_settings`)."""
    row = OPTIMIZERS.get(name)
    if row is None:
        raise ValueError(f"optimizer must be one of {tuple(OPTIMIZERS)}, got {name!r}")
    groups = param_groups(model, weight_decay, layer_decay)
    for g in groups:  # a group's own rate (the schedule multiplies it)
        g["lr"] = lr * g.pop("lr_scale", 1.0)
    settings = Settings(lr, eps, on_cuda=next(model.parameters()).is_cuda, own=own_settings(name, own))
    optimizer = row.build(groups, settings)
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
