"""The cyclic garbage collector against the objects every run shares.

Importing Beam creates ~150,000 objects that live as long as the process, and the collector walked them
over and over: as they were made (each time the oldest generation grew by a quarter), during a run, and
several times when the interpreter exits. On a 20 KB input those scans were a fifth of the run (0.3-0.5 s of
~2 s: ``benchmarks/startup.py``). Beam's import runs without full scans when ``bertstream.pipelines``
comes first (:func:`quiet_beam_import`), and a run freezes what is alive before it
(:func:`freeze_imported_objects`): frozen, objects are skipped by every later collection; they stay alive, as
they would anyway.
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_frozen = [False]


def freeze_imported_objects() -> None:
    """Move every object alive now into the collector's permanent generation, once a process (before its first
    run: then they are the imports, the caller's own state and its pending garbage, if any, which is kept). Not
    again: a later run's freeze would keep the earlier run's graph, a cycle collected otherwise."""
    if _frozen[0]:
        return
    _frozen[0] = True
    gc.freeze()


class _QuietLoader(importlib.abc.Loader):
    """Beam's own loader, its module run without the collector's full scans and what it made frozen after."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Young collections still run (the import's short-lived cycles go), the full ones wait for the freeze.
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], 1 << 30)
        try:
            self._loader.exec_module(module)
        finally:
            gc.freeze()
            gc.set_threshold(*thresholds)

    def __getattr__(self, name: str) -> Any:  # resource readers and the rest: Beam's loader's
        return getattr(self._loader, name)


class _QuietFinder:
    """On ``sys.meta_path`` until ``apache_beam`` is imported: finds it as the other finders do, once."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != "apache_beam":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def quiet_beam_import() -> None:
    """Import Beam, whenever it is first imported after this, without full scans, and freeze what it made."""
    if "apache_beam" not in sys.modules and not any(isinstance(f, _QuietFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder())
