"""A site folder holding only what the GPU machine has: the device image (``device_carry.DEVICE_IMAGE`` and what
it requires) and the carried wheels (``gpu_commands.CARRIED``), as links into this environment's site-packages.

The CPU rehearsal runs the real commands as ``python -S`` (no site-packages) with this folder on
``PYTHONPATH``: an optional import falls back as it would there, a required one fails the command here, before
any device time is spent.
"""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

from benchmarks.lib.device_carry import normalise, on_the_image
from benchmarks.lib.gpu_commands import CARRIED


def device_distributions() -> set[str]:
    return on_the_image() | {normalise(c) for c in CARRIED}


def build_site(dest: Path) -> Path:
    """Link every top-level entry (packages, modules, vendored ``.libs``, ``.dist-info``) of the device's
    distributions into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = device_distributions()
    for dist in md.distributions():
        if normalise(dist.metadata["Name"]) not in wanted:
            continue
        base = Path(str(dist.locate_file("")))
        for rel in dist.files or []:
            top = rel.parts[0]
            if top == ".." or top.endswith(".pth"):  # scripts in bin/, path hooks
                continue
            link, target = dest / top, base / top
            if not link.exists() and target.exists():
                link.symlink_to(target)
    return dest
