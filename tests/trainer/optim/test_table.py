"""The optimizer table: every row trains, resumes exactly from its state_dict, and is offered by both commands."""

from __future__ import annotations

import copy
import re

import click
import pytest
import torch
from click.testing import CliRunner

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
    names = ", ".join(map(repr, OPTIMIZERS))
    with pytest.raises(ValueError, match=re.escape(f"optimizer must be one of ({names})")):
        build_optimizer(_model(), "no-such-optimizer", 1e-2, 0.01)


@pytest.mark.parametrize(("name", "setting"), [(n, k) for n, row in OPTIMIZERS.items() for k in row.own])
def test_each_own_setting_of_a_row_reaches_its_optimizer(name, setting):
    # a row's own settings (its defaults, --optimizer-settings over them): another value changes the optimizer
    default = OPTIMIZERS[name].own[setting]
    other = (not default) if isinstance(default, bool) else default / 2
    built = build_optimizer(_model(), name, 1e-2, 0.01).state_dict()["param_groups"]
    changed = build_optimizer(_model(), name, 1e-2, 0.01, own=f"{setting}={other}").state_dict()["param_groups"]
    assert built != changed
    assert build_optimizer(_model(), name, 1e-2, 0.01, own=f"{setting}={default}").state_dict()["param_groups"] == built


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_an_own_setting_the_row_lacks_is_one_usage_error_naming_the_row_s(command, tmp_path):
    name = next(iter(OPTIMIZERS))
    required = {"pretrain": ["--data", "d"], "finetune": ["--task", "ner", "--train-data", "t", "--eval-data", "e"]}
    argv = [command, *required[command], "--output", str(tmp_path), "--optimizer", name]
    argv += ["--init", "random:tiny"] * (command == "finetune") + ["--optimizer-settings", "no_such_knob=1"]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2
    assert f"'no_such_knob' is no setting of --optimizer {name} (" in result.output
    assert all(k in result.output for k in OPTIMIZERS[name].own)


@pytest.mark.parametrize("name", [name for name, row in OPTIMIZERS.items() if "beta1" in row.own])
@pytest.mark.parametrize("value", ["2", "1", "-0.1"])
def test_a_moment_decay_rate_outside_zero_to_one_is_one_usage_error(name, value, tmp_path):
    # (the rows whose own settings hold a moment's decay rate: a row without one, e.g. SGD's, is not asked)
    # Round 8: `--optimizer-settings beta1=2` passed the flag's check and was torch's ValueError, a traceback at
    # the first step's set-up.
    argv = ["pretrain", "--data", "d", "--output", str(tmp_path), "--optimizer", name]
    result = CliRunner().invoke(main, [*argv, "--optimizer-settings", f"beta1={value}"])
    assert result.exit_code == 2, result.output
    assert f"beta1={value}: a moment's decay rate must be in [0, 1)" in result.output


def test_an_own_setting_given_twice_with_two_values_is_one_usage_error(tmp_path):
    # Round 8: `--optimizer-settings beta1=0.8,beta1=0.9` kept the last, as click's last-wins did for flags
    argv = ["pretrain", "--data", "d", "--output", str(tmp_path), "--optimizer-settings", "beta1=0.8,beta1=0.9"]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert "beta1 is given twice (0.8, 0.9): give it once" in result.output


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_both_commands_offer_every_optimizer_of_the_table(command):
    flag = next(p for p in main.commands[command].params if p.name == "optimizer")
    assert isinstance(flag.type, click.Choice) and tuple(flag.type.choices) == tuple(OPTIMIZERS)
    assert flag.default == "adamw"  # the default of both, as before the table
