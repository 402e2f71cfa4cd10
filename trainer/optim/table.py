"""Optimizers and the learning-rate schedule.

- Parameter groups: no weight decay on biases and LayerNorm weights (as BERT).
- AdamW: PyTorch's, fused on CUDA.
- LAMB (You et al. 2019, arXiv:1904.00962): Adam moments with a per-tensor trust ratio
  ``||w|| / ||update||``, for very large batches.
- Schedule: linear warmup to the peak rate, then linear decay to zero at ``total_steps`` (or, warm-up-stable-decay,
  held at the peak until the last 20% of the run).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from bertstream.trainer.config import LR_SCHEDULES

_LAYER = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")


def depth(name: str, num_layers: int) -> int:
    """How far from the output a parameter sits: embeddings 0, encoder layer i (0-based) i + 1, everything
    else (pooler, task heads) ``num_layers + 1``."""
    if ".embeddings." in f".{name}":
        return 0
    m = _LAYER.search(name)
    return int(m.group(1)) + 1 if m else num_layers + 1


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float = 1.0) -> list[dict]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (as BERT). ``layer_decay`` < 1 scales
    each group's rate by ``layer_decay ** (L + 1 - depth)`` (ELECTRA's layer-wise decay): layers near the
    input, whose pretrained features are the most general, move least. Each group's ``lr_scale`` multiplies
    the optimizer's rate."""
    num_layers = 1 + max((int(m.group(1)) for n, _ in model.named_parameters() if (m := _LAYER.search(n))), default=-1)
    groups: dict[tuple[int, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        no_decay = p.ndim < 2 or "LayerNorm" in name or name.endswith(".bias")
        # Without decay every parameter is at the head's depth: BERT's two groups, decayed first.
        d = depth(name, num_layers) if layer_decay != 1.0 else num_layers + 1
        groups.setdefault((d, no_decay), []).append(p)
    return [
        {"params": params, "weight_decay": 0.0 if nd else weight_decay, "lr_scale": layer_decay ** (num_layers + 1 - d)}
        for (d, nd), params in sorted(groups.items(), key=lambda kv: kv[0])
    ]


class Lamb(torch.optim.Optimizer):
    """LAMB with decoupled weight decay inside the trust-ratio update (the paper's Algorithm 2)."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        max_trust: float = 10.0,
    ) -> None:
        if lr <= 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid LAMB hyper-parameters lr={lr} betas={betas} eps={eps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_trust=max_trust))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = float(state["step"])
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                m_hat = m / (1 - beta1**step)
                v_hat = v / (1 - beta2**step)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm, u_norm = p.norm(), update.norm()
                trust = torch.where(
                    (w_norm > 0) & (u_norm > 0),
                    (w_norm / u_norm).clamp(max=group["max_trust"]),
                    torch.ones_like(w_norm),
                )
                p.add_(update * trust, alpha=-group["lr"])
        return loss


def build_optimizer(
    model: nn.Module,
    name: str,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    layer_decay: float = 1.0,
) -> torch.optim.Optimizer:
    groups = param_groups(model, weight_decay, layer_decay)
    for g in groups:  # a group's own rate (the schedule multiplies it)
        g["lr"] = lr * g.pop("lr_scale", 1.0)
    if name == "adamw":
        on_cuda = next(model.parameters()).is_cuda
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=on_cuda or None)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps)
    raise ValueError(f"optimizer must be 'adamw' or 'lamb', got {name!r}")


# Warm-up-stable-decay: the share of the run, at its end, over which the rate falls linearly to zero (Hägele et
# al. 2024 found 20% to match a cosine schedule tuned to the run's length).
WSD_DECAY_SHARE = 0.2


class WarmupLinearDecay:
    """Multiplier of the peak rate: linear 0 -> 1 over ``warmup`` steps, then linear 1 -> 0 at ``total``;
    ``schedule="wsd"`` (warm-up-stable-decay) holds the peak until the last ``WSD_DECAY_SHARE`` of the run and
    decays linearly to 0 at ``total`` over it.

    A class, not a lambda: LambdaLR's ``state_dict`` then records its fields.
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
        return max(0.0, (self.total - step) / max(1, self.total - decay_start))


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
