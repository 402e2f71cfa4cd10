from __future__ import annotations

import json

import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.tasks.classification import parse as TB
from bertstream.pipelines.tasks.classification.glue import PRESETS, resolve
from tests.conftest import shared_path


def table_rows(text: str, layout: TB.TableLayout, path: str = "f.tsv") -> tuple[list[TB.TextRow], Tally]:
    tally = Tally()
    return list(TB.parse_table(text.split("\n"), path, 0, layout, tally)), tally


TSV = TB.TableLayout("tsv", True, "sentence", None, "label")


def test_tsv_bad_rows_are_counted_by_reason_with_line_numbers():
    text = 'sentence\tlabel\nfine text\t1\ntoo\tmany\tcolumns\n\n   \t0\nno label\t \nanother "quoted" text\t0'
    rows, tally = table_rows(text, TSV)
    assert [(r.line, r.text_a, r.label) for r in rows] == [(2, "fine text", "1"), (7, 'another "quoted" text', "0")]
    c = tally.counters()
    assert c["rows_read"] == 5 and c["blank_lines_skipped"] == 1
    assert c["rows_dropped.wrong_column_count"] == 1 and c["rows_dropped.empty_text"] == 1
    assert c["rows_dropped.missing_label"] == 1
    assert c["first_lines"]["rows_dropped.wrong_column_count"] == ["f.tsv:3"]
    assert c["first_lines"]["rows_dropped.empty_text"] == ["f.tsv:5"]


def test_regression_labels_must_be_finite_numbers():
    layout = TB.TableLayout("tsv", True, "a", "b", "score", regression=True)
    rows, tally = table_rows("a\tb\tscore\nx\ty\t3.2\nx\ty\tnan\nx\ty\tfive", layout)
    assert [r.label for r in rows] == ["3.2"]
    assert tally.counts["rows_dropped.bad_regression_label"] == 2


@pytest.mark.parametrize("bad", ['"stray quote, never closed', '"closed"then text'])
def test_csv_unbalanced_quote_costs_one_counted_row_not_the_rows_after_it(bad):
    # Before: the quote swallowed every later row into one field; one row was counted, garbage was kept.
    layout = TB.TableLayout("csv", True, "text", None, "label")
    text = f'text,label\n{bad},pos\ngood one,neg\n"quoted, fine",pos\nlast,neg\n'
    rows, tally = table_rows(text, layout, "f.csv")
    assert [(r.line, r.text_a, r.label) for r in rows] == [
        (3, "good one", "neg"),
        (4, "quoted, fine", "pos"),
        (5, "last", "neg"),
    ]
    c = tally.counters()
    assert c["rows_read"] == 4 and c["rows_dropped.unbalanced_quote"] == 1
    assert c["first_lines"]["rows_dropped.unbalanced_quote"] == ["f.csv:2"]
    if bad.startswith('"stray'):  # the open quote had taken the next two lines, up to the next quote
        assert c[TB.LINES_AFTER_BAD_QUOTE] == 2


def test_csv_quotes_may_span_lines_and_rows_keep_their_first_line():
    layout = TB.TableLayout("csv", True, "text", None, "label")
    rows, tally = table_rows('text,label\n"a, quoted\nmulti-line text",pos\nplain,neg\n', layout, "f.csv")
    assert [(r.line, r.text_a, r.label) for r in rows] == [
        (2, "a, quoted\nmulti-line text", "pos"),
        (4, "plain", "neg"),
    ]


def test_jsonl_rows_malformed_and_missing_fields():
    layout = TB.TableLayout("jsonl", True, "text", None, "label")
    lines = [
        json.dumps({"text": "good", "label": 1}),
        "{not json",
        json.dumps({"text": "no label"}),
        json.dumps({"text": 5, "label": "x"}),
        json.dumps({"text": "b", "label": "neg"}),
        json.dumps({"text": "c", "label": [1, 2]}),  # became the label '[1, 2]' (and {"x": 1} '{"x": 1}')
        json.dumps({"text": "d", "label": {"x": 1}}),
        json.dumps({"text": "e", "label": True}),
    ]
    rows, tally = table_rows("\n".join(lines), layout, "f.jsonl")
    assert [(r.line, r.label) for r in rows] == [(1, "1"), (5, "neg"), (8, "true")]
    assert tally.counts["rows_dropped.malformed_json"] == 1 and tally.counts["rows_dropped.missing_field"] == 1
    assert tally.counts["rows_dropped.text_not_a_string"] == 1 and tally.counts["rows_read"] == 8  # was empty_text
    assert tally.counts["rows_dropped.label_not_a_value"] == 2


def test_missing_columns_are_usage_errors_naming_the_flag(tmp_path):
    p = tmp_path / "train.tsv"
    p.write_text("text\tlabel\nhello\t1\n")
    with pytest.raises(UsageError) as e:
        TB.check_table_layout(str(p), TB.TableLayout("tsv", True, "sentence", None, "label"))
    assert e.value.param == "text-column" and "'sentence'" in str(e.value)
    with pytest.raises(UsageError) as e:
        TB.check_table_layout(str(p), TB.TableLayout("tsv", True, "text", "text_b", "label"))
    assert e.value.param == "text-pair-column"
    with pytest.raises(UsageError) as e:
        TB.check_table_layout(str(p), TB.TableLayout("tsv", False, "0", None, "5"))
    assert e.value.param == "label-column"


def test_glue_files_resolve_headers_boms_and_test_layouts():
    mrpc_dev = shared_path("tasks", "mrpc", "dev.tsv")
    assert mrpc_dev.read_bytes().startswith(b"\xef\xbb\xbf")  # the BOM the reader must remove
    first = TB.first_line(str(mrpc_dev), "tsv")
    assert first[0] == "Quality"
    assert resolve(PRESETS["mrpc"], first, "dev.tsv").label == "Quality"
    test = resolve(PRESETS["mrpc"], TB.first_line(str(shared_path("tasks", "mrpc", "test.tsv")), "tsv"), "test.tsv")
    assert test.label is None and test.pair == "#2 String"
    sst2_test = resolve(PRESETS["sst2"], TB.first_line(str(shared_path("tasks", "sst2", "test.tsv")), "tsv"), "t")
    assert sst2_test.label is None and sst2_test.text == "sentence"
    # CoLA: headerless train/dev (source, label, original label, sentence), headed test.
    assert resolve(PRESETS["cola"], ["gj04", "1", "", "Our friends won't buy this analysis."], "x").header is False
    assert resolve(PRESETS["cola"], ["index", "sentence"], "x").label is None
    with pytest.raises(UsageError, match="lacks"):
        resolve(PRESETS["rte"], ["index", "question", "sentence", "label"], "qnli.tsv")
