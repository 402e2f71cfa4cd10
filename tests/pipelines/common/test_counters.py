from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.counters import FIRST_KEPT, Tally
from bertstream.pipelines.tasks.kinds import KINDS

PIPELINES = Path(__file__).resolve().parents[3] / "pipelines"


def test_first_places_are_the_earliest_whatever_the_merge_order():
    parts = []
    for start in (30, 0, 15):
        t = Tally()
        for line in range(start, start + 15):
            t.note("rows_dropped.x", 0, line, f"f:{line}")
        parts.append(t)
    a, b = Tally.merge(parts), Tally.merge(parts[::-1])
    assert a.counters() == b.counters()
    assert a.counters()["first_lines"]["rows_dropped.x"] == [f"f:{i}" for i in range(FIRST_KEPT)]
    assert a.counts["rows_dropped.x"] == 45


def test_drops_of_every_unit_share_one_naming():
    t = Tally()
    t.note(C.drop("empty_text", "rows"), 0, 3, "f:3")
    t.add(C.drop(C.EMPTY))  # pretraining's unit: documents
    t.add("rows_read", 2)
    assert C.dropped(t.counts, "rows") == {"empty_text": 1} and C.dropped(t.counts) == {C.EMPTY: 1}
    assert C.merge([t.counts, {C.drop(C.EMPTY): 2}])["documents_dropped.empty"] == 3


def test_merging_counters_adds_each_input_once_in_place():
    """Every loop is bounded (issue 33): CombineGlobally(merge) re-merged and re-sorted all it had gathered every
    ten inputs; with one source per file (100,000 one-line files, 300,000 counters) the run grew quadratically
    with the file count (over 15 minutes; 166 s after this change). Each input is now added to the accumulator
    once, and the result is the same sorted dict on any runner and in any order."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    inputs = [{f"source_documents.f{i:05d}.txt": 1, "documents_read": 1} for i in range(3000)]
    fn = C.MergeCounters()
    acc = fn.create_accumulator()
    for element in inputs[:2000]:
        assert fn.add_input(acc, element) is acc  # in place, not a copy of everything so far
    rest = fn.create_accumulator()
    for element in inputs[2000:]:
        rest = fn.add_input(rest, element)
    expected = C.merge(inputs)
    assert fn.extract_output(fn.merge_accumulators([rest, acc])) == expected
    assert list(fn.extract_output(acc)) == sorted(fn.extract_output(acc))
    with beam.Pipeline(runner=FnApiRunner()) as p:
        merged = p | beam.Create(inputs, reshuffle=False) | beam.CombineGlobally(C.MergeCounters())
        assert_that(merged, equal_to([expected]))


def _declared_reasons() -> dict[str, list[str]]:
    """Every ``reason("NAME", ...)`` call in the pipelines' sources: NAME -> the modules declaring it."""
    found: dict[str, list[str]] = {}
    for path in sorted(PIPELINES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "reason":
                if node.args and isinstance(node.args[0], ast.Constant):
                    module = ".".join(path.relative_to(PIPELINES.parent).with_suffix("").parts)
                    found.setdefault(node.args[0].value, []).append(module)
    return found


def _import_declaring_modules(declared: dict[str, list[str]]) -> None:
    """Import every module that declares a reason: the table holds a room's reasons once its module is loaded."""
    for module in {m for where in declared.values() for m in where}:
        importlib.import_module(f"bertstream.{module}")


def test_every_drop_reason_is_declared_once_where_it_is_counted_and_the_table_holds_it():
    # issue 55: a reason one room counts is declared by that room's module (a task kind's, an input format's), so a
    # kind or a format dropping for a reason of its own stays in its room; the table collects them all, once.
    declared = _declared_reasons()
    assert {name: where for name, where in declared.items() if len(where) > 1} == {}
    _import_declaring_modules(declared)
    assert set(C.DROP_REASONS) == set(declared) and len(declared) >= 25, sorted(set(declared) ^ set(C.DROP_REASONS))
    # a reason's table row is one thing: the same name with another meaning is refused
    with pytest.raises(ValueError, match="declared twice"):
        C.reason(C.EMPTY, ("documents",), "something else")
    assert C.reason(C.EMPTY, ("documents",), "no text at all", shown_at_zero=True) == C.EMPTY


def test_every_drop_reason_is_defined_once_in_the_table():
    # issue 55: reasons were spelled again where they were counted (tasks/read.py's and counters' malformed_json,
    # classification/featurize's no_tokens) and hand-listed by the report; now each is the table's, by name.
    _import_declaring_modules(_declared_reasons())
    units = {"documents", *(kind.unit for kind in KINDS)}
    assert all(r.name == name and set(r.units) <= units and r.means for name, r in C.DROP_REASONS.items())
    spelled = []
    for path in sorted(PIPELINES.rglob("*.py")):
        if path == PIPELINES / "common" / "counters.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                value = node.value.value
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "drop":
                value = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            else:
                continue
            if isinstance(value, str) and value in C.DROP_REASONS:
                spelled.append(f"{path.relative_to(PIPELINES)}:{node.lineno} {value}")
    assert spelled == []


def test_the_report_lists_the_tables_reasons():
    from bertstream.pipelines.report.data import DROP_REASONS, DUPLICATE_REASONS

    assert set(DROP_REASONS) == {r.name for r in C.DROP_REASONS.values() if r.shown_at_zero}
    assert set(DUPLICATE_REASONS) == {C.EXACT_DUPLICATE, C.NEAR_DUPLICATE}
