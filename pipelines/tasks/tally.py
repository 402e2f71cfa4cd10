"""Counters of a task run with the first few places of every problem, mergeable in any order.

A ``Tally`` travels through the pipeline as data (one per file read, one per featurized batch) and is merged
globally, so the manifest's figures are exact on any runner and worker count. Problems are noted with
``note(reason, file_index, position, where)``: the count goes up and ``where`` (``path:line`` or a SQuAD
question id) is kept if it is among the first ``FIRST_KEPT`` by ``(file_index, position)``, which makes the
kept list independent of the order in which workers finish.

Counter names: ``<unit>_read``, ``<unit>_used``, ``<unit>_dropped.<reason>`` (``unit`` is rows, sentences or
examples), plus alterations and figures (``truncated``, ``control_chars_removed``, ...). The manifest holds
them flat, with ``"first_lines": {counter name: [where, ...]}``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines import counters as C

FIRST_KEPT = 10
FIRST_LINES = "first_lines"


@dataclass(slots=True)
class Tally:
    counts: Counter = field(default_factory=Counter)
    first: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)

    def add(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] += n

    def note(self, name: str, file_index: int, position: int, where: str, n: int = 1) -> None:
        """Count a problem and remember where it happened (the first ``FIRST_KEPT`` places)."""
        self.counts[name] += n
        kept = self.first.setdefault(name, [])
        kept.append((file_index, position, where))
        if len(kept) > 2 * FIRST_KEPT:
            kept.sort()
            del kept[FIRST_KEPT:]

    def update(self, other: Tally) -> None:
        self.counts.update(other.counts)
        for name, places in other.first.items():
            kept = self.first.setdefault(name, [])
            kept.extend(places)
            kept.sort()
            del kept[FIRST_KEPT:]

    @classmethod
    def merge(cls, tallies: Iterable[Tally]) -> Tally:
        out = cls()
        for t in tallies:
            out.update(t)
        return out

    def counters(self) -> dict[str, Any]:
        """Manifest form: counters sorted by name, then ``first_lines``."""
        out: dict[str, Any] = {k: v for k, v in sorted(self.counts.items()) if v}
        out[FIRST_LINES] = {
            name: [w for _, _, w in sorted(places)[:FIRST_KEPT]] for name, places in sorted(self.first.items())
        }
        return out

    def report(self) -> None:
        C.report(self.counts)


def dropped(counters: Mapping[str, Any], unit: str) -> dict[str, int]:
    prefix = f"{unit}_dropped."
    return {k[len(prefix) :]: v for k, v in sorted(counters.items()) if k.startswith(prefix)}


class CombineTallies:
    """``beam.CombineGlobally`` function: many tallies -> one."""

    def __call__(self, tallies: Iterable[Tally]) -> Tally:
        return Tally.merge(tallies)
