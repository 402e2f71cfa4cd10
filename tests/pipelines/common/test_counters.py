from __future__ import annotations

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.counters import FIRST_KEPT, Tally


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
