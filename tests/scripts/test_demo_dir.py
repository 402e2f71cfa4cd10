"""`make demo` replaces DEMO_DIR whole: a folder that is not a demo's is refused before anything is removed."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO

DEMO = REPO / "scripts" / "recipes" / "demo.sh"


def _demo(demo_dir, tmp_path, **settings: str) -> subprocess.CompletedProcess:
    # A bertprep that stops the demo at its first command: what matters is whether the guard let it get there.
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "bertprep").write_text("#!/bin/sh\necho reached bertprep; exit 3\n")
    (fake / "bertprep").chmod(0o755)
    env = {**os.environ, "DEMO_DIR": str(demo_dir), "PATH": f"{fake}:{os.environ['PATH']}", **settings}
    return subprocess.run(["bash", str(DEMO)], env=env, capture_output=True, text=True, timeout=60)


def test_a_folder_that_is_not_a_demos_is_refused_and_kept(tmp_path):
    user = tmp_path / "experiments"
    (user / "corpus").mkdir(parents=True)
    (user / "notes.txt").write_text("a week of work\n")
    done = _demo(user, tmp_path)
    assert done.returncode == 2 and "holds corpus notes.txt and no .bertstream-demo mark" in done.stderr
    assert (user / "notes.txt").read_text() == "a week of work\n" and "reached" not in done.stdout


def test_a_folder_whose_entries_only_bear_demo_names_is_kept(tmp_path):
    """Issue 53: a folder whose every entry had a demo's name (run, shards) was taken for a demo's and deleted,
    with run/checkpoints/IMPORTANT.txt in it."""
    proj = tmp_path / "proj"
    (proj / "run" / "checkpoints").mkdir(parents=True)
    (proj / "run" / "checkpoints" / "IMPORTANT.txt").write_text("three weeks of training\n")
    (proj / "shards").mkdir()
    done = _demo(proj, tmp_path)
    assert done.returncode == 2, done.stdout
    assert done.stderr.count("\n") == 1 and "holds run shards and no .bertstream-demo mark" in done.stderr
    assert (proj / "run" / "checkpoints" / "IMPORTANT.txt").read_text() == "three weeks of training\n"


def test_a_demos_folder_is_replaced(tmp_path):
    new = tmp_path / "demo"
    done = _demo(new, tmp_path)
    assert done.returncode == 3 and "reached bertprep" in done.stdout, done.stderr
    assert sorted(p.name for p in new.iterdir()) == [".bertstream-demo"]  # made, and marked as the demo's
    (new / "anything").write_text("x")  # a marked folder is the demo's whatever it holds
    assert _demo(new, tmp_path).returncode == 3
    assert sorted(p.name for p in new.iterdir()) == [".bertstream-demo"]
    (tmp_path / "empty").mkdir()
    assert _demo(tmp_path / "empty", tmp_path).returncode == 3
    (tmp_path / "file").write_text("x")
    assert _demo(tmp_path / "file", tmp_path).returncode == 2


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("DEMO_STEPS", "abc", "DEMO_STEPS must be a whole number of steps from 1 to 9999999, got 'abc'"),
        ("DEMO_STEPS", "0", "got '0'"),
        ("DEMO_STEPS", "010", "got '010'"),  # read as octal by printf: the export looked for another step
        ("DEMO_FULL", "yes", "DEMO_FULL must be 0 or 1, got 'yes'"),
        ("OMP_NUM_THREADS", "two", "OMP_NUM_THREADS must be a whole number >= 1, got 'two'"),
    ],
)
def test_the_demos_settings_are_checked_before_any_work(tmp_path, name, value, words):
    done = _demo(tmp_path / "demo", tmp_path, **{name: value})
    assert done.returncode == 2 and done.stderr.startswith("Error: ") and done.stderr.endswith(f"{words}\n"), (
        done.stderr
    )
    assert done.stderr.count("\n") == 1
    assert "reached" not in done.stdout and not (tmp_path / "demo").exists()


@pytest.mark.parametrize("name", ["DEMO_TASK_TRAIN", "DEMO_TASK_DEV"])
def test_a_task_file_that_is_not_there_is_named_before_any_work(tmp_path, name):
    # Round 7: DEMO_TASK_TRAIN=/nonexistent ran the corpus, vocabulary, shards and the whole pretraining first,
    # and failed at the fine-tuning stage minutes later.
    real = tmp_path / "train.tsv"
    real.write_text("sentence\tlabel\nfine .\t1\n")
    settings = {"DEMO_TASK_TRAIN": str(real), "DEMO_TASK_DEV": str(real), name: str(tmp_path / "missing.tsv")}
    done = _demo(tmp_path / "demo", tmp_path, **settings)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"Error: {name}={tmp_path / 'missing.tsv'} is not a readable file")
    assert "reached" not in done.stdout and not (tmp_path / "demo").exists()
