"""`make demo` replaces DEMO_DIR whole: a folder that is not a demo's is refused before anything is removed."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import REPO

DEMO = REPO / "scripts" / "recipes" / "demo.sh"


def _demo(demo_dir, tmp_path) -> subprocess.CompletedProcess:
    # A bertprep that stops the demo at its first command: what matters is whether the guard let it get there.
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "bertprep").write_text("#!/bin/sh\necho reached bertprep; exit 3\n")
    (fake / "bertprep").chmod(0o755)
    env = {**os.environ, "DEMO_DIR": str(demo_dir), "PATH": f"{fake}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(DEMO)], env=env, capture_output=True, text=True, timeout=60)


def test_a_folder_that_is_not_a_demos_is_refused_and_kept(tmp_path):
    user = tmp_path / "experiments"
    (user / "corpus").mkdir(parents=True)
    (user / "notes.txt").write_text("a week of work\n")
    done = _demo(user, tmp_path)
    assert done.returncode == 2 and "holds notes.txt, which no demo wrote" in done.stderr
    assert (user / "notes.txt").read_text() == "a week of work\n" and "reached" not in done.stdout


def test_a_demos_folder_is_replaced(tmp_path):
    old = tmp_path / "demo"  # an earlier demo's, from before the mark: only the names a demo writes
    (old / "run" / "checkpoints").mkdir(parents=True)
    (old / "corpus").mkdir()
    done = _demo(old, tmp_path)
    assert done.returncode == 3 and "reached bertprep" in done.stdout, done.stderr
    assert sorted(p.name for p in old.iterdir()) == [".bertstream-demo"]  # replaced, and marked as the demo's
    (old / "anything").write_text("x")  # a marked folder is the demo's whatever it holds
    assert _demo(old, tmp_path).returncode == 3
    (tmp_path / "file").write_text("x")
    assert _demo(tmp_path / "file", tmp_path).returncode == 2
