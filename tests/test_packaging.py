"""One import namespace, ``bertstream.*``: what the wheel installs, what the checkout imports, and that nothing
imports the folders by their bare names (``pipelines``, ``trainer``, ``schemas``, ``cli``), which PyPI packages
also use: Coqui's ``trainer`` is one, and installing bertstream beside it must leave both importable."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.conftest import REPO

FOLDERS = {"pipelines": "pipelines", "trainer": "trainer", "schemas": "schemas", "cli": "cli"}
BARE = set(FOLDERS) | {"configs"}  # configs: the configuration package's name before it was cli
# A bare name used as a module path in a string: `python -m trainer`, "pipelines.common.x.Y", "import schemas".
_BARE_IN_TEXT = re.compile(r"(?:^|-m |import |from )(?:pipelines|trainer|schemas|configs)\.?\w*(?:\s|$|\.)")


def _python_files() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / p for p in tracked.stdout.split() if not p.startswith("bertstream/")]


def test_no_module_imports_a_folder_by_its_bare_name():
    found = []
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if any(_BARE_IN_TEXT.search(line.strip()) for line in node.value.splitlines() if "." in line):
                    names = [node.value.strip().split()[0]]
            bad = [n for n in names if n.split(".")[0] in BARE]
            found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in bad]
    assert not found, "bare module names (use bertstream.*):\n" + "\n".join(found)


def test_the_links_and_the_wheel_map_the_same_folders():
    for name, folder in FOLDERS.items():
        link = REPO / "bertstream" / name
        assert link.is_symlink() and os.readlink(link) == f"../{folder}", link
    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    mapped = {k.removeprefix("bertstream."): v for k, v in meta["package-dir"].items() if k != "bertstream"}
    assert mapped == FOLDERS
    # every package is listed: a new sub-package that is not would be missing from the wheel
    found = {"bertstream"}
    for name, folder in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found.add(".".join(["bertstream", name, *rel.parts]))
    assert sorted(meta["packages"]) == sorted(found)


@pytest.mark.slow
def test_the_wheel_installs_beside_pypis_trainer(tmp_path):
    """The wheel and Coqui's ``trainer`` (PyPI) in one fresh environment: both import, each its own code."""
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    subprocess.run([*build, str(REPO)], check=True, capture_output=True, text=True)
    ours = next(wheels.glob("bertstream-*.whl"))
    names = zipfile.ZipFile(ours).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"bertstream"}, top
    assert "bertstream/pipelines/cli.py" in names and "bertstream/trainer/cli.py" in names
    # Coqui's trainer and the two small packages it imports; the heavy ones (torch, tensorboard) are this
    # environment's, seen through a path file (its own .pth files, the editable bertstream's among them, are not run).
    fetch = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels)]
    got = subprocess.run([*fetch, "trainer==0.0.36", "coqpit", "soundfile"], capture_output=True, text=True)
    assert got.returncode == 0, f"pip could not download Coqui's trainer from PyPI: {got.stderr[-2000:]}"
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # this pip installs into it (--python): no ensurepip
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    here = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "_test_base.pth").write_text("\n".join(here) + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q"]
    install += map(str, wheels.glob("*.whl"))
    subprocess.run(install, check=True, capture_output=True, text=True)
    probe = (
        "import trainer, bertstream.trainer.cli, bertstream.pipelines.cli, bertstream.schemas.manifest\n"
        "print(trainer.__file__); print(bertstream.trainer.cli.__file__); print(hasattr(trainer, 'Trainer'))"
    )
    r = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    coqui, ours_file, has_trainer = r.stdout.split()
    assert coqui.startswith(site) and coqui.endswith("trainer/__init__.py")
    assert ours_file.startswith(site) and ours_file.endswith("bertstream/trainer/cli.py")
    assert has_trainer == "True"  # Coqui's own class, not our package
    for script in ("bertprep", "berttrain"):
        r = subprocess.run([str(env_dir / "bin" / script), "--help"], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0 and "Usage:" in r.stdout, r.stderr[-2000:]


def test_the_declared_beam_range_is_the_tested_one():
    """pyproject's apache-beam range admits exactly the Beam minor versions the Dask runner was tested on, and the
    one installed here (what the suite runs) is among them: declared and tested never drift apart."""
    from packaging.requirements import Requirement

    from bertstream.pipelines.runners.dask_runner import TESTED_BEAM

    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (beam,) = [Requirement(d) for d in deps if Requirement(d).name == "apache-beam"]
    minors = {f"2.{m}" for m in range(40, 120)}
    admitted = {m for m in minors if beam.specifier.contains(f"{m}.0") or beam.specifier.contains(f"{m}.9")}
    assert admitted == set(TESTED_BEAM), f"pyproject admits {sorted(admitted)}, the runner was tested on {TESTED_BEAM}"
    import apache_beam

    assert ".".join(apache_beam.__version__.split(".")[:2]) in TESTED_BEAM
