"""berttrain reads its small files through the capped reader (issue 53): a FIFO as the run folder's lock or as
--model-config hung the run until killed; /dev/zero or an 8 GB file there was a MemoryError."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bertstream.trainer.rundir import LOCK_NAME
from tests.trainer.test_run_safety import small_dataset


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_dataset(tmp_path_factory.mktemp("small_files") / "ds")


def pretrain(data, out, *args: str) -> subprocess.CompletedProcess:
    argv = ["pretrain", "--data", str(data), "--output", str(out), "--batch-size", "4", "--max-steps", "1"]
    argv += ["--num-workers", "0", "--no-tensorboard", *args]
    # A hang is the fault: the timeout makes it a failure, not a stuck suite.
    return subprocess.run(
        [sys.executable, "-m", "bertstream.trainer", *argv], capture_output=True, text=True, timeout=120
    )


def one_error(done: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert text in done.stderr, done.stderr


def test_a_fifo_as_the_run_folders_lock_is_refused_not_waited_on(data, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / LOCK_NAME)
    one_error(pretrain(data, run), 2, "is not a regular file (a FIFO, a device or a folder), so no lock of a run")
    assert (run / LOCK_NAME).exists()  # not ours: left as it was


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "8gb"])
def test_a_model_config_that_is_no_small_file_is_one_line(data, tmp_path, kind):
    config = tmp_path / "model.json"
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "dev_zero":
        config.symlink_to("/dev/zero")
    else:
        with open(config, "wb") as f:
            f.truncate(8 << 30)  # sparse
    expected = {
        "fifo": "is a FIFO (named pipe)",
        "dev_zero": "is a device",
        "8gb": "holds more than 67108864 bytes, the cap on a file read whole",
    }
    done = pretrain(data, tmp_path / "run", "--model-config", str(config))
    one_error(done, 1, f"--model-config {config} {expected[kind]}")
