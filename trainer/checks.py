"""Checks every section of the trainer's configuration makes of its own values (both commands' sections)."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from bertstream.cli.errors import check
from bertstream.cli.options import MAX_INT


def check_finite(cfg: Any) -> None:
    """Every float setting of ``cfg`` is a finite number: ``inf`` passes ``> 0`` as ``nan`` fails it, and a
    learning rate of inf trains to NaN logits without a word. Called first by each section with floats."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, float):
            check(math.isfinite(value), f.name, f"must be a finite number, got {value}")


def check_ints(cfg: Any, names: tuple[str, ...], low: int) -> None:
    """Each of ``names`` is an integer in ``[low, MAX_INT]``."""
    for name in names:
        value = getattr(cfg, name)
        check(isinstance(value, int) and value >= low, name, f"must be an integer >= {low}, got {value!r}")
        check(value <= MAX_INT, name, f"must be at most 2**63 - 1, got {value!r}")
