"""The optimizer table: every row trains, resumes exactly from its state_dict, and is offered by both commands."""

from __future__ import annotations

import copy

import click
import pytest
import torch

from bertstream.trainer.cli import main
from bertstream.trainer.optim.table import OPTIMIZERS, build_optimizer


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 1))


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> float:
    loss = (model(x) - 1).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_trains_and_resumes_exactly_from_its_state(name):
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    model = _model()
    opt = build_optimizer(model, name, 1e-2, 0.01)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]  # the table's groups, for every row
    losses = [_step(model, opt, x) for _ in range(5)]
    assert losses[-1] < losses[0]
    saved = copy.deepcopy((model.state_dict(), opt.state_dict()))  # as a checkpoint holds them (not views)
    _step(model, opt, x)
    # a resume: a new model and optimizer from the saved states take the same next step
    again = _model()
    again.load_state_dict(saved[0])
    resumed = build_optimizer(again, name, 1e-2, 0.01)
    resumed.load_state_dict(saved[1])
    _step(again, resumed, x)
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)


def test_an_unknown_name_is_refused_with_the_table_s_names():
    with pytest.raises(ValueError, match=r"optimizer must be one of \('adamw', 'lamb'"):
        build_optimizer(_model(), "sgd", 1e-2, 0.01)


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_both_commands_offer_every_optimizer_of_the_table(command):
    flag = next(p for p in main.commands[command].params if p.name == "optimizer")
    assert isinstance(flag.type, click.Choice) and tuple(flag.type.choices) == tuple(OPTIMIZERS)
    assert flag.default == "adamw"  # the default of both, as before the table
