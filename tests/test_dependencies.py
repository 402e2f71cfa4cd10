"""The base install (``pip install .``, what Beam workers get) covers every module of ``pipelines`` and
``schemas``, so every ``bertprep`` command runs without the trainer's extra: each third-party module they
import is provided by a distribution that ``[project].dependencies`` names."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OWN = {"bertstream", "tests", "benchmarks"}
# Imported only behind a flag that names its own install (`--word-segmenter rjieba|jieba`: the `chinese` extra).
# `--runner DaskRunner`: the `dask` extra, named by the error when it is missing.
OPTIONAL = {"rjieba", "jieba", "dask", "distributed"}


def imported_modules(package: str) -> set[str]:
    names = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - OWN - set(sys.stdlib_module_names) - {"__future__"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_base_dependencies_cover_every_module_the_pipelines_import():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {canonical(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]) for d in meta["dependencies"]}
    providers = md.packages_distributions()
    missing = {}
    for module in sorted(imported_modules("pipelines") | imported_modules("schemas") | imported_modules("cli")):
        if module in OPTIONAL:
            continue
        dists = {canonical(d) for d in providers.get(module, [module])}
        if not dists & base:
            missing[module] = sorted(dists)
    assert not missing, f"imported by pipelines/ or schemas/ but not in [project].dependencies: {missing}"
