"""The layout of pipelines/, as ``scripts/tools/import_graph.py`` reads it: no cycle, no import up a level, the job
folders siblings, and the import count of the layout the house redesign (issue 22) sketched."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "tools"))

import import_graph as G  # noqa: E402

# The stages of each job as modules; the folders every job shares as one node each.
SKETCH = ("common", "inputs", "runners", "tokenizer", "report", "tasks", "pretraining/kernels")


def _graph(collapse: tuple[str, ...] = ()) -> dict[str, set[str]]:
    here = os.getcwd()
    os.chdir(REPO)  # the script takes the package as a path below the working directory
    try:
        return G.graph("pipelines", folders=False, collapse=collapse)
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def modules() -> dict[str, set[str]]:
    return _graph()


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else "top"


def test_the_graph_has_no_cycle(modules):
    assert G.cycles(modules) == []


def test_common_imports_no_job_and_the_jobs_do_not_import_each_other(modules):
    # top (cli, vocab, extract) may import any folder; a job folder only itself and the shared rooms; inputs/
    # (--input into documents: formats, byte ranges, JSON streaming, tables) only itself and common/; runners/
    # (where a pipeline runs, the dataset run, the error funnel) only itself and common/; tokenizer/ (--vocab
    # and the encoder) only itself and common/; common/ only itself.
    rooms = {"common", "inputs", "runners", "tokenizer"}
    allowed = {
        "common": {"common"},
        "inputs": {"inputs", "common"},
        "runners": {"runners", "common"},
        "tokenizer": {"tokenizer", "common"},
    }
    allowed |= {job: {job, *rooms} for job in ("pretraining", "tasks", "report")}
    wrong = [
        f"{a} -> {b}"
        for a, targets in modules.items()
        for b in targets
        if _folder(a) in allowed and _folder(b) not in allowed[_folder(a)]
    ]
    assert wrong == []


def test_common_imports_no_runner(modules):
    # Issue 55: common/ is what every job uses; the dataset run and the error funnel, which start or name a
    # runner, live in runners/ above it.
    common = {a: targets for a, targets in modules.items() if _folder(a) == "common"}
    assert common, "no module of pipelines/common found"
    assert [f"{a} -> {b}" for a, targets in common.items() for b in targets if _folder(b) == "runners"] == []


def test_vocab_and_extract_read_through_the_inputs_room_not_the_pretraining_job(modules):
    package = "pipelines"
    for job in ("vocab", "extract", "vocab_config", "extract_config"):
        folders = {_folder(t) for t in modules[f"{package}.{job}"]}
        assert "inputs" in folders and "pretraining" not in folders, job


def test_the_sketched_layout_keeps_within_its_import_count():
    edges = _graph(SKETCH)
    count = sum(len(t) for t in edges.values())
    # The sketch of the house redesign: 26 modules and folders, 67 imports, 2.6 a node (the flat layout before it:
    # 40 and 129, 3.2 a node). New rooms and stages add nodes; what must not grow is the imports each one makes.
    # Issue 55 split common/ by purpose: tokenizer/ is a node of its own, which the three modules that load or
    # encode with it now name beside common/ (82 imports between 31 nodes, 2.65 a node).
    nodes = len(edges)
    assert count <= 2.65 * nodes, f"{count} imports between {nodes} stages and shared folders (at most 2.65 a node)"
    assert count >= 40, f"only {count} imports found: the script no longer reads the imports"
    # 7: the inputs room sits between the jobs and common/, and common/ imports no runner (issue 55; it was 8:
    # pretraining.config -> inputs -> common -> runners)
    assert G.levels(edges) <= 7
