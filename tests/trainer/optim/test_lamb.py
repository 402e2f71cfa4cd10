"""The foreach LAMB against the per-tensor loop it replaced (the paper's Algorithm 2, written plainly here)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bertstream.trainer.model import BertConfig, BertForPreTraining
from bertstream.trainer.optim.lamb import Lamb
from bertstream.trainer.optim.table import build_optimizer


@torch.no_grad()
def reference_step(params: list[torch.Tensor], state: dict, group: dict) -> None:
    """The loop LAMB of before (one tensor at a time), the definition the foreach step must match."""
    beta1, beta2 = group["betas"]
    for p in params:
        if p.grad is None:
            continue
        s = state.setdefault(p, {"step": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
        s["step"] += 1
        s["m"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
        s["v"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
        update = (s["m"] / (1 - beta1 ** s["step"])) / ((s["v"] / (1 - beta2 ** s["step"])).sqrt() + group["eps"])
        if group["weight_decay"]:
            update.add_(p, alpha=group["weight_decay"])
        w_norm, u_norm = p.norm(), update.norm()
        trust = (w_norm / u_norm).clamp(max=group["max_trust"]) if w_norm > 0 and u_norm > 0 else 1.0
        p.add_(update * trust, alpha=-group["lr"])


def tiny_model(seed: int = 0) -> BertForPreTraining:
    config = BertConfig(vocab_size=64, hidden_size=16, num_layers=2, num_heads=2, max_position_embeddings=32)
    return BertForPreTraining(config, seed=seed)


def fill_grads(model: torch.nn.Module, step: int) -> None:
    gen = torch.Generator().manual_seed(step)
    for i, p in enumerate(model.parameters()):
        p.grad = None if i == 3 else torch.randn(p.shape, generator=gen) * 0.1  # one tensor without a gradient


def test_foreach_lamb_matches_the_per_tensor_loop_over_steps():
    model = tiny_model()
    ref = copy.deepcopy(model)
    opt = Lamb(model.parameters(), lr=1e-2, weight_decay=0.01)
    group = dict(opt.param_groups[0])
    ref_state: dict = {}
    for step in range(5):
        fill_grads(model, step)
        fill_grads(ref, step)
        opt.step()
        reference_step(list(ref.parameters()), ref_state, group)
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    p0 = next(model.parameters())
    assert opt.state[p0]["step"].item() == 5  # the count of the state format checkpoints keep


def test_a_found_inf_step_leaves_parameters_and_state_as_they_were():
    model = tiny_model()
    opt = Lamb(model.parameters(), lr=1e-2)
    fill_grads(model, 0)
    opt.step()
    before = copy.deepcopy((model.state_dict(), opt.state_dict()))
    for p in model.parameters():
        if p.grad is not None:
            p.grad[0] = float("nan")
    opt.found_inf = torch.ones(())
    opt.step()
    after = (model.state_dict(), opt.state_dict())
    for k, v in before[0].items():
        assert torch.equal(v, after[0][k]), k
    for i, s in before[1]["state"].items():
        for k, v in s.items():
            assert torch.equal(v, after[1]["state"][i][k]), (i, k)
    opt.found_inf = torch.zeros(())  # and a good step then moves on as from the good state
    fill_grads(model, 1)
    opt.step()
    assert opt.state[next(model.parameters())]["step"].item() == 2


class OpCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("found_inf", [False, True])
def test_one_step_issues_a_bounded_number_of_ops(found_inf):
    """Ops dispatched by one step of BERT-tiny's LAMB: the loop issued 22 per tensor; the foreach step issues a
    fixed few per group (and one select per gradient when a skip flag is given)."""
    model = tiny_model()
    opt = build_optimizer(model, "lamb", 1e-3, 0.01)
    fill_grads(model, 0)
    opt.step()  # the state exists
    opt.found_inf = torch.zeros(()) if found_inf else None
    tensors = sum(1 for p in model.parameters() if p.grad is not None)
    with OpCount() as count:
        opt.step()
    assert count.ops <= 100 + (tensors if found_inf else 0), (count.ops, tensors)  # the loop: 1,032
