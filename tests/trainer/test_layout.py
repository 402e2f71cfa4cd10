"""The layout of trainer/, as ``scripts/tools/import_graph.py`` reads it: no cycle between modules or folders, and
no import up a level. Levels, bottom up: the shared modules and rooms (``data/``, ``hf/``, ``optim/``, the model,
checkpoints, runtime, ...); the commands (``pretrain/``, ``finetune/``, ``embed``), which never import each
other's loops; the command line (``cli``, ``cli_errors``, ``__main__``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "tools"))

import import_graph as G  # noqa: E402

# Nodes as the script names them, PACKAGE.<module or folder>.
PACKAGE = "trainer"
COMMANDS = {f"{PACKAGE}.{name}" for name in ("pretrain", "finetune", "embed")}
COMMAND_LINE = {f"{PACKAGE}.{name}" for name in ("cli", "cli_errors", "__main__")}


def _graph(folders: bool) -> dict[str, set[str]]:
    here = os.getcwd()
    os.chdir(REPO)  # the script takes the package as a path below the working directory
    try:
        return G.graph(PACKAGE, folders=folders)
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def folders() -> dict[str, set[str]]:
    return _graph(folders=True)


def _level(node: str) -> int:
    return 2 if node in COMMAND_LINE else 1 if node in COMMANDS else 0


def test_no_cycle_between_modules_or_folders(folders):
    assert G.cycles(_graph(folders=False)) == []
    assert G.cycles(folders) == []


def test_no_import_goes_up_a_level(folders):
    assert COMMANDS <= set(folders) and COMMAND_LINE <= set(folders)  # the names above still exist
    up = [f"{a} -> {b}" for a, targets in folders.items() for b in targets if _level(b) > _level(a)]
    assert up == []


def test_the_commands_share_only_the_shared_level(folders):
    # embed reads fine-tuning's task datasets and heads; pretraining and fine-tuning import neither each other
    # nor embed (what both need lives below them: runtime, optim/, checkpoints)
    across = {(a, b) for a, targets in folders.items() for b in targets if a in COMMANDS and b in COMMANDS}
    assert across <= {(f"{PACKAGE}.embed", f"{PACKAGE}.finetune")}
