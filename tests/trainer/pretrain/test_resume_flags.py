"""What a resume takes from its checkpoint and what it refuses, through the command line: the settings a resume
keeps are those tagged FIXED where they are declared (``cli.options``), the architecture those tagged ARCH.
A resume takes every one the command line does not give from the run; one given with another value is refused
in one ``Error:`` line naming its flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.cli import main
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.pretrain import resume
from tests.trainer.test_cli_errors import one_error
from tests.trainer.test_run_safety import small_dataset

FAST = ["--batch-size", "4", "--warmup-steps", "1", "--checkpoint-every", "2", "--num-workers", "0"]
FAST += ["--no-tensorboard", "--log-every", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return small_dataset(tmp_path_factory.mktemp("resume_flags") / "ds", n=32)


def berttrain(data: Path, out: Path, *args: str):
    return CliRunner().invoke(main, ["pretrain", "--data", str(data), "--output", str(out), *FAST, *args])


def saved_flags(out: Path, step: int) -> dict:
    saved = json.loads((ckpt.step_dir(out, step) / "config.json").read_text())
    return options.saved_values(TrainConfig, saved["train"])


def test_a_resume_takes_the_architecture_and_the_runs_settings_from_its_checkpoint(data, tmp_path):
    out = tmp_path / "run"
    first = ["--model", "mini", "--norm-placement", "pre", "--lr", "0.002", "--seed", "7", "--max-steps", "2"]
    result = berttrain(data, out, *first)
    assert result.exit_code == 0, result.output
    result = berttrain(data, out, "--max-steps", "4")  # none of the run's flags repeated
    assert result.exit_code == 0, result.output
    assert "trained to step 4" in result.output
    model = json.loads((ckpt.step_dir(out, 4) / "config.json").read_text())["model"]
    assert (model["hidden_size"], model["norm_placement"]) == (256, "pre")  # mini, pre-LN: the run's
    flags = saved_flags(out, 4)
    assert (flags["preset"], flags["norm_placement"], flags["lr"], flags["seed"]) == ("mini", "pre", 0.002, 7)
    # a flag given with the run's own value is no conflict
    assert berttrain(data, out, "--max-steps", "6", "--model", "mini", "--norm-placement", "pre").exit_code == 0
    # the placement is compared with the checkpoint's model itself
    one_error(berttrain(data, out, "--max-steps", "8", "--norm-placement", "post"), 1, "(the run has pre)")


def test_a_conflicting_flag_is_named_in_one_error_line(data, tmp_path):
    out = tmp_path / "run"
    assert berttrain(data, out, "--model", "mini", "--max-steps", "2").exit_code == 0
    line = one_error(
        berttrain(data, out, "--max-steps", "4", "--model", "small"), 1, "--model small (the run has mini)"
    )
    assert "drop --model" in line
    assert [c.name for c in ckpt.list_checkpoints(out)] == ["step-0000002"]  # nothing trained
    # a new phase takes the checkpoint's architecture too, and refuses another one by name
    path = str(ckpt.step_dir(out, 2))
    phase = ["--resume", path, "--reset-optimizer", "--max-steps", "2", "--lr", "0.001"]
    assert berttrain(data, tmp_path / "p2", *phase).exit_code == 0
    assert saved_flags(tmp_path / "p2", 2)["preset"] == "mini"
    one_error(
        berttrain(data, tmp_path / "p3", *phase, "--model", "small"), 1, "--model small (the checkpoint has mini)"
    )


def test_an_architecture_flag_beside_init_from_is_refused_by_name(data, tmp_path):
    out = tmp_path / "run"
    assert berttrain(data, out, "--max-steps", "2").exit_code == 0
    weights = str(ckpt.step_dir(out, 2))
    assert berttrain(data, tmp_path / "a", "--init-from", weights, "--max-steps", "1").exit_code == 0
    for flag, value in (("--model", "mini"), ("--model", "tiny"), ("--norm-placement", "pre")):
        result = berttrain(data, tmp_path / "b", "--init-from", weights, "--max-steps", "1", flag, value)
        one_error(result, 2, f"drop {flag}")


@pytest.mark.parametrize("name", resume.FIXED)
def test_every_setting_a_resume_keeps_is_refused_when_changed(name):
    # the list is the declarations' FIXED tags: each one, saved with another value, is named by its flag
    cfg = TrainConfig.build(paths=("d",), output="o")
    now = options.flat(cfg)
    saved = {"train": {**now, name: _another(now[name])}}
    flag = options.flag_for(TrainConfig, name)
    with pytest.raises(RunError, match=f"but {flag} "):
        resume.check_resume(cfg, saved, Path("ck"), 1)


def _another(value):
    """A value of the same kind that is not ``value`` (a saved config is not validated as a flag is)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 2 + 1
    return f"{value}-other" if value else "other"
