"""What one device call carries, for each script that prepares one (``gpu_suite.py --prepare``, ``scale_out.py
--prepare``): the packages the device image already has, a distribution's requirement closure at the versions
installed here, the ``pip download`` of wheels for the device's Python, and the 64 MiB a call may carry.

The image (the device tool's KINDS.md, read 2026-11-17): CPython 3.12 with pip, torch, pyarrow, numba, tokenizers,
transformers, grpcio and what they require; apache-beam, dask and webdataset are not in it.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

CARRY_LIMIT = 64 * 2**20  # what one device call carries: the working tree and the carried paths together
DEVICE_IMAGE = ("torch", "pyarrow", "numba", "llvmlite", "numpy", "tokenizers", "transformers", "grpcio")
DEVICE_PYTHON = "3.12"
# manylinux tags pip must be told one by one (it matches each exactly).
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(dist: str) -> list[str]:
    """What ``dist`` requires, markers evaluated here, no extras."""
    from packaging.requirements import Requirement

    out = []
    for spec in md.requires(dist) or []:
        req = Requirement(spec)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req.name)
    return out


def closure(dists: Iterable[str], *, skip: Iterable[str] = ()) -> dict[str, str]:
    """``dists`` and everything they require, as installed here: {normalised name: version}. A name in ``skip``
    is not entered, nor what only it requires; one not installed here is left out (nothing here needs it)."""
    skipped = {normalise(s) for s in skip}
    found: dict[str, str] = {}
    todo = list(dists)
    while todo:
        name = normalise(todo.pop())
        if name in found or name in skipped:
            continue
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
        todo.extend(requirement_names(name))
    return dict(sorted(found.items()))


def on_the_image() -> set[str]:
    """The normalised names the device image holds: :data:`DEVICE_IMAGE` and what it requires."""
    return set(closure(DEVICE_IMAGE))


def download(pins: dict[str, str], dest: Path, python: str | None = None) -> None:
    """``pip download`` each ``name==version`` into ``dest``: pure-Python wheels for any Python, or with ``python``
    (``3.12``) the binary wheels of that CPython on x86_64 Linux too."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest)]
    if python is not None:
        abi = "cp" + python.replace(".", "")
        cmd += [a for tag in PLATFORMS for a in ("--platform", tag)]
        cmd += ["--python-version", python, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none"]
    subprocess.run([*cmd, *(f"{n}=={v}" for n, v in pins.items())], check=True)


def tree_bytes(repo: Path) -> int:
    """Bytes of the working tree's tracked files: they travel with every device call."""
    files = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    return sum((repo / f).stat().st_size for f in files.decode().split("\0") if f and (repo / f).is_file())


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
