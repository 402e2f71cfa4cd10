"""The one reader of CSV/TSV tables (the csv input format and the task tables use it)."""

from __future__ import annotations

from bertstream.pipelines.inputs.delimited import MAX_RECORD_LINES, csv_records, split_fields, table_records


def test_tsv_splits_on_tabs_without_quoting_and_csv_quotes():
    assert split_fields('"a\tb"\tc', "tsv") == ['"a', 'b"', "c"]
    assert split_fields('"a,b",c', "csv") == ["a,b", "c"]


def test_a_stray_quote_costs_one_record_not_the_rest_of_the_file():
    lines = ["h1,h2", '1,"open', "2,two", '3,"x"y', "4,four"]
    got = list(csv_records(lines))
    assert got == [(1, ["h1", "h2"], 1), (2, None, 3), (3, ["2", "two"], 1), (4, None, 1), (5, ["4", "four"], 1)]


def test_a_quoted_field_spans_lines_but_no_more_than_the_cap():
    assert list(csv_records(['1,"a', 'b"', "2,c"])) == [(1, ["1", "a\nb"], 2), (3, ["2", "c"], 1)]
    unclosed = ['"x'] + ["y"] * (MAX_RECORD_LINES + 5)
    first = next(csv_records(unclosed))
    assert first[1] is None and first[2] <= MAX_RECORD_LINES


def test_table_records_number_tsv_lines_as_csv_records_are():
    assert list(table_records(["a\tb", "c\td"], "tsv")) == [(1, ["a", "b"], 1), (2, ["c", "d"], 1)]
