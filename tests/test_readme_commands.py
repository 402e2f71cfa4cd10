"""The README's command lines name programs the set-up installs, with flags those programs take: a user who
copies a line gets the program's work, not `command not found` (the hub download once named `huggingface-cli`,
which the venv's huggingface_hub no longer ships)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent
# Programs the README's recipes use that are the user's own, not the set-up's.
USERS_OWN = {"wget", "source", "make", "torchrun", "export", "cd", "ls", "cat"}


def command_lines() -> list[list[str]]:
    """Each command of the README's ```bash blocks as words: continuation lines joined, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(words)
    return lines


def test_every_program_the_readme_runs_is_installed_by_the_set_up():
    missing = sorted({w[0] for w in command_lines() if w[0] not in USERS_OWN and not (BIN / w[0]).exists()})
    assert not missing, f"README runs programs the venv does not have: {missing}"


def test_the_hub_download_line_takes_its_flags():
    hub = [w for w in command_lines() if w[:2] == ["hf", "download"]]
    assert hub, "the README's hub download line is gone: update this test"
    help_text = subprocess.run(
        [str(BIN / "hf"), "download", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "COLUMNS": "200"},
        timeout=120,
    ).stdout
    for words in hub:
        flags = [w.split("=")[0] for w in words if w.startswith("--")]
        unknown = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", help_text)]
        assert not unknown, f"`hf download` takes no {unknown}"


@pytest.mark.parametrize("program", ["bertprep", "berttrain"])
def test_the_readmes_subcommands_exist(program):
    import click

    from bertstream.pipelines.cli import main as bertprep
    from bertstream.trainer.cli import main as berttrain

    group = {"bertprep": bertprep, "berttrain": berttrain}[program]
    assert isinstance(group, click.Group)
    used = sorted({w[1] for w in command_lines() if w[0] == program and len(w) > 1 and not w[1].startswith("-")})
    assert used and set(used) <= set(group.commands), f"{program}: README uses {used}, it has {sorted(group.commands)}"


def test_the_recipe_trains_at_the_rates_that_suit_its_model():
    # README's step 5 at the fine-tuning default (BERT-base's 5e-5) predicted one class on a small model: the
    # recipe's pretrain and finetune lines carry the rates of trainer.optim.advice for the recipe's --model
    from bertstream.trainer.model_config import PRESETS
    from bertstream.trainer.optim.advice import suggested_lr

    lines = command_lines()
    (pretrain,) = [w for w in lines if w[:2] == ["berttrain", "pretrain"]]
    (finetune,) = [w for w in lines if w[:2] == ["berttrain", "finetune"]]
    hidden = PRESETS[pretrain[pretrain.index("--model") + 1]](100).hidden_size
    assert "--lr" in pretrain and float(pretrain[pretrain.index("--lr") + 1]) == suggested_lr(hidden, "pretrain")
    assert "--lr" in finetune and float(finetune[finetune.index("--lr") + 1]) == suggested_lr(hidden, "finetune")
