from __future__ import annotations

from pipelines.tasks.tally import FIRST_KEPT, Tally


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
