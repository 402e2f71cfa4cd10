"""The recipes check every setting before minutes of work, one line each (issue 53: LR=0 passed the recipe's own
check, a number, and failed at the first berttrain, after the data was prepared)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO

SCRIPTS = REPO / "scripts" / "recipes"


def recipe(tmp_path, name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "SHARED": str(tmp_path / "no-shared-data-here"), **env}
    return subprocess.run(
        ["bash", str(SCRIPTS / name), *args], capture_output=True, text=True, env=full, timeout=60, cwd=tmp_path
    )


@pytest.mark.parametrize(
    "setting, value",
    [("LR", "0"), ("FT_LR", "0.0"), ("CONTINUE_LR", "-1e-4"), ("LAYER_DECAY", "1.5"), ("MLM_PROB", "1"), ("LR", "abc")],
)
def test_pretraining_gain_refuses_a_rate_out_of_range_before_any_work(tmp_path, setting, value):
    done = recipe(tmp_path, "pretraining_gain.sh", str(tmp_path / "run"), **{setting: value})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"Error: {setting} must be numbers above 0 and at most ")
    assert done.stderr.endswith(f", got '{value}'\n") and done.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_the_default_rates_pass(tmp_path):
    done = recipe(tmp_path, "pretraining_gain.sh", str(tmp_path / "run"), STOP_AFTER="data")
    assert "must be numbers above" not in done.stderr  # it stops at the missing shared data instead
    assert "no-shared-data-here" in done.stderr


def test_finetune_sweep_refuses_a_zero_rate(tmp_path):
    data = tmp_path / "data"
    for split in ("sst2_train", "sst2_dev", "mrpc_train", "mrpc_dev"):
        (data / split).mkdir(parents=True)
        (data / split / "manifest.json").write_text("{}")
    (tmp_path / "ckpt").mkdir()
    done = recipe(tmp_path, "finetune_sweep.sh", str(tmp_path / "ckpt"), str(data), str(tmp_path / "out"), LRS="1e-4 0")
    assert done.returncode == 2 and done.stderr == "Error: LRS must be numbers above 0 and at most 1, got '1e-4 0'\n"


@pytest.mark.parametrize("setting, value", [("SEEDS", "1 two"), ("TASKS", "sst2 imdb")])
def test_pretraining_ablation_checks_what_it_passes_on(tmp_path, setting, value):
    done = recipe(tmp_path, "pretraining_ablation.sh", str(tmp_path / "out"), **{setting: value})
    assert done.returncode == 2 and done.stderr.startswith(f"Error: {setting} must be") and value in done.stderr
    assert not (tmp_path / "out").exists()
