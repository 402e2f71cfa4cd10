"""Several global combines as one: ``{name: PCollection}`` -> one ``{name: output}`` dict.

Each ``beam.CombineGlobally`` is eleven Beam transforms (keying, a combine per key, and the default for an empty
input: an impulse, a reshuffle, an injection) and its own stages to run. A run's last stage needed four of them
(the shard results, the counters, the groups, the [UNK] words): on a small input, building, translating and
running those was a tenth of the run. Here the inputs are tagged, flattened and combined once, each by its own
``CombineFn``; an empty input gives its ``CombineFn``'s output for no elements, as its own combine would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam


class TaggedCombineFn(beam.CombineFn):
    """``(name, value)`` elements, each added with ``fns[name]``; the output is ``{name: that fn's output}``."""

    def __init__(self, fns: Mapping[str, beam.CombineFn]) -> None:
        self.fns = dict(fns)

    def setup(self, *args: Any, **kwargs: Any) -> None:
        for fn in self.fns.values():
            fn.setup(*args, **kwargs)

    def create_accumulator(self) -> dict[str, Any]:
        return {name: fn.create_accumulator() for name, fn in self.fns.items()}

    def add_input(self, accumulator: dict[str, Any], element: tuple[str, Any]) -> dict[str, Any]:
        name, value = element
        accumulator[name] = self.fns[name].add_input(accumulator[name], value)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict[str, Any]]) -> dict[str, Any]:
        accs = list(accumulators)
        return {name: fn.merge_accumulators([a[name] for a in accs]) for name, fn in self.fns.items()}

    def compact(self, accumulator: dict[str, Any]) -> dict[str, Any]:
        return {name: fn.compact(accumulator[name]) for name, fn in self.fns.items()}

    def extract_output(self, accumulator: dict[str, Any]) -> dict[str, Any]:
        return {name: fn.extract_output(accumulator[name]) for name, fn in self.fns.items()}

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        for fn in self.fns.values():
            fn.teardown(*args, **kwargs)


def _tag(value: Any, name: str) -> tuple[str, Any]:
    return name, value


class CombineEach(beam.PTransform):
    """``{name: PCollection}`` -> one ``{name: fns[name] over that PCollection}`` (one element, always)."""

    def __init__(self, fns: Mapping[str, beam.CombineFn]) -> None:
        super().__init__()
        self.fns = dict(fns)

    def expand(self, pcolls: Mapping[str, beam.PCollection]) -> beam.PCollection:
        if set(pcolls) != set(self.fns):
            raise ValueError(f"inputs {sorted(pcolls)} and combines {sorted(self.fns)} differ")
        tagged = [pcoll | f"Tag{name}" >> beam.Map(_tag, name) for name, pcoll in pcolls.items()]
        return tagged | "Flatten" >> beam.Flatten() | "Combine" >> beam.CombineGlobally(TaggedCombineFn(self.fns))
