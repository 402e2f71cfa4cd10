"""`make` set-up says what it installs and why, in order (torch's CPU wheel pinned first, then the project),
and leaves pip's own output visible: a dry run (`make -n`) of the set-up target, nothing installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_setup_announces_each_step_and_keeps_pip_visible(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "venv"
    dry = subprocess.run(
        ["make", "-n", "-B", f"VENV={venv}", f"{venv}/.installed"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    steps = [i for i, line in enumerate(dry) if line.startswith('echo "setup ') and "/4: " in line]
    assert len(steps) == 4, dry
    torch = next(i for i, line in enumerate(dry) if line.endswith("pip install torch==2.13.0"))
    project = next(i for i, line in enumerate(dry) if "pip install -e '.[train,test]'" in line)
    assert steps[2] < torch < steps[3] < project  # each install after the line that says what and why
    assert "CUDA" in dry[steps[2]] and "extras" in dry[steps[3]]
    assert not [line for line in dry if "pip install" in line and " -q" in line]  # minutes of silence otherwise
