"""The launch variables are checked in one line naming the variable (issue 53): WORLD_SIZE=abc was a ValueError
traceback, a RANK outside WORLD_SIZE or a lone rank with WORLD_SIZE=2 a torch store traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bertstream.trainer import distributed as D
from bertstream.trainer.errors import RunError
from tests.beam_services import free_port
from tests.trainer.test_run_safety import small_dataset

PEERS = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "LOCAL_RANK": "0"}


@pytest.mark.parametrize(
    "env, words",
    [
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not a whole number >= 1"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' is not a whole number >= 1"),
        (
            {"WORLD_SIZE": "2", "RANK": "2", **PEERS},
            "RANK='2' is not a whole number from 0 to 1 (a rank of WORLD_SIZE 2)",
        ),
        ({"WORLD_SIZE": "2", "RANK": "-1", **PEERS}, "RANK='-1' is not a whole number from 0 to 1"),
        ({"WORLD_SIZE": "2", "RANK": "x", **PEERS}, "RANK='x'"),
        ({"WORLD_SIZE": "2", "RANK": "1", **PEERS, "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK='3'"),
        ({"WORLD_SIZE": "2", "RANK": "1", **PEERS, "MASTER_PORT": "99999"}, "MASTER_PORT='99999'"),
        (
            {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0"},
            "WORLD_SIZE is 2 but MASTER_ADDR, MASTER_PORT is not set",
        ),
    ],
)
def test_a_bad_launch_variable_is_named(monkeypatch, env, words):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RunError, match=words.replace("(", r"\(").replace(")", r"\)")):
        D.launch_env()


def test_a_good_launch_and_none_pass(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert D.launch_env() == (1, 0, 0)
    for name, value in {"WORLD_SIZE": "4", "RANK": "3", **PEERS, "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    assert D.launch_env() == (4, 3, 1)


@pytest.mark.slow  # a process importing torch, then the 3 s wait: 10-40 s on two busy cores
def test_a_lone_rank_of_two_ends_in_one_line_after_the_timeout(tmp_path):
    data = small_dataset(tmp_path / "ds")
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(free_port())
    argv = ["pretrain", "--data", str(data), "--output", str(tmp_path / "run"), "--batch-size", "4", "--max-steps", "1"]
    argv += ["--num-workers", "0", "--no-tensorboard", "--dist-timeout", "3"]
    done = subprocess.run(
        [sys.executable, "-m", "bertstream.trainer", *argv], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "WORLD_SIZE=2, RANK=0: the ranks did not meet at MASTER_ADDR:MASTER_PORT" in errors[0]
    assert "within --dist-timeout 3 s" in errors[0]
    assert not (tmp_path / "run").exists()
