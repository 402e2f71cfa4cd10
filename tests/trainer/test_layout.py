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


def test_the_shared_fine_tuning_and_export_modules_name_no_task_kind():
    """A task kind is its ``Task`` (``finetune/tasks.py``, the table of kinds) and nothing else: the reader, the
    batching, the loop, the heads and the Hugging Face export ask it. A module that names a kind is where the next
    kind would have to be added by hand (``load_task_data``, ``_check_rows``, ``reuse_head`` and the export's
    per-kind tables did, before)."""
    import re

    from bertstream.schemas import tasks as T

    names = [n for n, v in vars(T).items() if n.isupper() and isinstance(v, str) and v in T.EARLIER_LAYOUTS]
    kind_names = re.compile(r"\bT\.(" + "|".join(names) + r")\b|[\"'](" + "|".join(T.EARLIER_LAYOUTS) + r")[\"']")
    root = REPO / PACKAGE
    shared = [p for p in root.glob("finetune/*.py") if p.name != "tasks.py"] + list(root.glob("hf/*.py"))
    assert len(shared) > 10 and names
    found = {str(p.relative_to(root)): kind_names.findall(p.read_text(encoding="utf-8")) for p in shared}
    assert {p: hits for p, hits in found.items() if hits} == {}
