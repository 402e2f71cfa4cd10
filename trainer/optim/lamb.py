"""LAMB (You et al. 2019, arXiv:1904.00962): Adam moments with a per-tensor trust ratio ``||w|| / ||update||``, for
very large batches. An optimizer of the table (:mod:`bertstream.trainer.optim.table`).

The step is written with ``torch._foreach_*`` ops over a group's tensors at once, as PyTorch's own AdamW: a
Python loop issued 22 ops per tensor (4,614 per step for BERT-base's 206 tensors, each a kernel launch on a GPU).
Nothing is read back to the host: the step count lives on the device and the bias corrections are computed
there, so a step never waits for the device."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


class Lamb(torch.optim.Optimizer):
    """LAMB with decoupled weight decay inside the trust-ratio update (the paper's Algorithm 2).

    ``found_inf`` (an attribute, as PyTorch's fused AdamW reads it): a float 0-dim tensor on the parameters'
    device; where it is 1 the step leaves the parameters and the state (moments, step count) exactly as they
    were, without the host reading it (see ``training.Training.optimizer_step``)."""

    found_inf: Tensor | None

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
        self.found_inf = None

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._group_step(group, params, getattr(self, "found_inf", None))
        return loss

    def _group_step(self, group: dict, params: list[Tensor], found_inf: Tensor | None) -> None:
        beta1, beta2 = group["betas"]
        grads: list[Tensor] = []
        exp_avgs: list[Tensor] = []
        exp_avg_sqs: list[Tensor] = []
        steps: list[Tensor] = []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif state["step"].device != p.device:  # a state saved when the count lived on the host
                state["step"] = state["step"].to(p.device, torch.float32)
            assert p.grad is not None  # params are those with a gradient
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if found_inf is None:
            keep: Tensor | float = 1.0
            torch._foreach_add_(steps, 1.0)
            w1: list[Tensor] | float = 1 - beta1
            w2: list[Tensor] | float = 1 - beta2
        else:
            # A skipped step: gradients zeroed (NaN * 0 is NaN, so a select) and every weight 0, which leaves
            # the moments, the count and the parameters bit for bit as they were.
            keep = 1.0 - found_inf
            skip, zero = found_inf.bool(), found_inf.new_zeros(())
            grads = [torch.where(skip, zero, g) for g in grads]
            torch._foreach_add_(steps, keep)
            w1, w2 = [keep * (1 - beta1)] * len(params), [keep * (1 - beta2)] * len(params)
        torch._foreach_lerp_(exp_avgs, grads, w1)  # m = beta1 m + (1 - beta1) g
        torch._foreach_lerp_(exp_avg_sqs, torch._foreach_mul(grads, grads), w2)  # v = beta2 v + (1 - beta2) g^2
        # bias corrections 1 - beta^t on the device; t >= 1 even for a skipped first step (0/0 otherwise)
        counts = torch._foreach_clamp_min(steps, 1.0)
        bc1 = torch._foreach_pow(beta1, counts)
        torch._foreach_sub_(bc1, 1.0)
        torch._foreach_neg_(bc1)  # 1 - beta1^t (0-dim tensors: cheap)
        bc2 = torch._foreach_pow(beta2, counts)
        torch._foreach_sub_(bc2, 1.0)
        torch._foreach_neg_(bc2)
        torch._foreach_sqrt_(bc2)
        # update = m_hat / (sqrt(v_hat) + eps) = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, bc2)
        torch._foreach_add_(denom, group["eps"])
        updates = torch._foreach_div(exp_avgs, bc1)
        torch._foreach_div_(updates, denom)
        if group["weight_decay"]:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
        # the trust ratio ||w|| / ||update||, per tensor, as one vector [n]
        w_norm = torch.stack(torch._foreach_norm(params))
        u_norm = torch.stack(torch._foreach_norm(updates))
        ok = (w_norm > 0) & (u_norm > 0)
        trust = torch.where(ok, (w_norm / u_norm.masked_fill(~ok, 1.0)).clamp(max=group["max_trust"]), 1.0)
        scale = trust * (-group["lr"]) * keep  # [n]
        torch._foreach_mul_(updates, list(scale.unbind()))
        torch._foreach_add_(params, updates)
