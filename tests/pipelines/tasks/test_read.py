from __future__ import annotations

import json

import pytest

from pipelines.read import InputError
from pipelines.runner import UsageError
from pipelines.tasks import read as R
from pipelines.tasks.glue import PRESETS, resolve
from pipelines.tasks.tally import FIRST_KEPT, Tally
from tests.conftest import shared_path


def table_rows(text: str, layout: R.TableLayout, path: str = "f.tsv") -> tuple[list[R.TextRow], Tally]:
    tally = Tally()
    return list(R.parse_table(text.split("\n"), path, 0, layout, tally)), tally


TSV = R.TableLayout("tsv", True, "sentence", None, "label")


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
    layout = R.TableLayout("tsv", True, "a", "b", "score", regression=True)
    rows, tally = table_rows("a\tb\tscore\nx\ty\t3.2\nx\ty\tnan\nx\ty\tfive", layout)
    assert [r.label for r in rows] == ["3.2"]
    assert tally.counts["rows_dropped.bad_regression_label"] == 2


@pytest.mark.parametrize("bad", ['"stray quote, never closed', '"closed"then text'])
def test_csv_unbalanced_quote_costs_one_counted_row_not_the_rows_after_it(bad):
    # Before: the quote swallowed every later row into one field; one row was counted, garbage was kept.
    layout = R.TableLayout("csv", True, "text", None, "label")
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
        assert c[R.LINES_AFTER_BAD_QUOTE] == 2


def test_csv_quotes_may_span_lines_and_rows_keep_their_first_line():
    layout = R.TableLayout("csv", True, "text", None, "label")
    rows, tally = table_rows('text,label\n"a, quoted\nmulti-line text",pos\nplain,neg\n', layout, "f.csv")
    assert [(r.line, r.text_a, r.label) for r in rows] == [
        (2, "a, quoted\nmulti-line text", "pos"),
        (4, "plain", "neg"),
    ]


def test_jsonl_rows_malformed_and_missing_fields():
    layout = R.TableLayout("jsonl", True, "text", None, "label")
    lines = [
        json.dumps({"text": "good", "label": 1}),
        "{not json",
        json.dumps({"text": "no label"}),
        json.dumps({"text": 5, "label": "x"}),
        json.dumps({"text": "b", "label": "neg"}),
    ]
    rows, tally = table_rows("\n".join(lines), layout, "f.jsonl")
    assert [(r.line, r.label) for r in rows] == [(1, "1"), (5, "neg")]
    assert tally.counts["rows_dropped.malformed_json"] == 1 and tally.counts["rows_dropped.missing_field"] == 1
    assert tally.counts["rows_dropped.empty_text"] == 1 and tally.counts["rows_read"] == 5


def test_missing_columns_are_usage_errors_naming_the_flag(tmp_path):
    p = tmp_path / "train.tsv"
    p.write_text("text\tlabel\nhello\t1\n")
    with pytest.raises(UsageError) as e:
        R.check_table_layout(str(p), R.TableLayout("tsv", True, "sentence", None, "label"))
    assert e.value.param == "text-column" and "'sentence'" in str(e.value)
    with pytest.raises(UsageError) as e:
        R.check_table_layout(str(p), R.TableLayout("tsv", True, "text", "text_b", "label"))
    assert e.value.param == "text-pair-column"
    with pytest.raises(UsageError) as e:
        R.check_table_layout(str(p), R.TableLayout("tsv", False, "0", None, "5"))
    assert e.value.param == "label-column"


def test_glue_files_resolve_headers_boms_and_test_layouts():
    mrpc_dev = shared_path("tasks", "mrpc", "dev.tsv")
    assert mrpc_dev.read_bytes().startswith(b"\xef\xbb\xbf")  # the BOM the reader must remove
    first = R.first_line(str(mrpc_dev), "tsv")
    assert first[0] == "Quality"
    assert resolve(PRESETS["mrpc"], first, "dev.tsv").label == "Quality"
    test = resolve(PRESETS["mrpc"], R.first_line(str(shared_path("tasks", "mrpc", "test.tsv")), "tsv"), "test.tsv")
    assert test.label is None and test.pair == "#2 String"
    sst2_test = resolve(PRESETS["sst2"], R.first_line(str(shared_path("tasks", "sst2", "test.tsv")), "tsv"), "t")
    assert sst2_test.label is None and sst2_test.text == "sentence"
    # CoLA: headerless train/dev (source, label, original label, sentence), headed test.
    assert resolve(PRESETS["cola"], ["gj04", "1", "", "Our friends won't buy this analysis."], "x").header is False
    assert resolve(PRESETS["cola"], ["index", "sentence"], "x").label is None
    with pytest.raises(UsageError, match="lacks"):
        resolve(PRESETS["rte"], ["index", "question", "sentence", "label"], "qnli.tsv")


# --------------------------------------------------------------------------------------------- CoNLL

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
bad NN I-NP Z-TAG

Only NNP B-NP I-PER
"""


def conll(text: str, scheme: str = "iob2") -> tuple[list[R.Sentence], Tally]:
    tally = Tally()
    return list(R.parse_conll(text.split("\n"), "v.txt", 0, scheme, tally)), tally


def test_conll_sentences_and_malformed_lines_drop_their_sentence_with_line_numbers():
    sentences, tally = conll(CONLL)
    assert [(s.line, s.words, s.tags) for s in sentences] == [
        (3, ["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
        (14, ["Only"], ["I-PER"]),
    ]
    c = tally.counters()
    assert c["sentences_read"] == 4 and c["sentences_dropped.malformed_line"] == 2 and c["docstart_lines"] == 1
    assert c["first_lines"]["lines_malformed.wrong_field_count"] == ["v.txt:8"]
    assert c["first_lines"]["lines_malformed.bad_tag"] == ["v.txt:12"]
    assert c["first_lines"]["sentences_dropped.malformed_line"] == ["v.txt:7", "v.txt:10"]
    assert c["first_lines"]["invalid_iob2_transitions"] == ["v.txt:14"]  # I-PER opening an entity


def test_iob1_is_converted_to_iob2():
    assert R.iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG"]) == (
        ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG"],
        3,
    )
    sentences, tally = conll("Only NNP B-NP I-PER\nMe NNP I-NP I-PER\n", scheme="iob1")
    assert sentences[0].tags == ["B-PER", "I-PER"] and tally.counts["tags_converted_iob1_to_iob2"] == 1
    assert "invalid_iob2_transitions" not in tally.counts


def test_a_file_that_is_not_conll_is_a_clear_error(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text("This is prose, not CoNLL.\nIt has sentences on lines.\n")
    with pytest.raises(UsageError, match="not a CoNLL file") as e:
        R.looks_like_conll(str(p))
    assert e.value.param == "input"
    with pytest.raises(InputError, match="not a CoNLL file"):
        conll("a b\nc d e\nf\n\ng h i j k\n")
    R.looks_like_conll(str(shared_path("tasks", "conll2003", "valid.txt")))


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


# --------------------------------------------------------------------------------------------- SQuAD

CONTEXT = "The Broncos beat the  Panthers in Super Bowl 50.\nDenver won 24 to 10."


@pytest.mark.parametrize(
    "text,start,span,how",
    [
        ("Panthers", 22, (22, 30), "exact"),
        ("the Panthers", 17, (17, 30), "whitespace_normalized"),  # the context has two spaces
        ("Denver", 40, (49, 55), "offset_shifted"),
        ("Bowl  50", 34, (40, 47), "offset_shifted_whitespace_normalized"),
        ("Seahawks", 10, None, "unmatched"),
        ("", 0, None, "unmatched"),
        ("Denver", "49", None, "unmatched"),
    ],
)
def test_answer_alignment_and_its_documented_fallback(text, start, span, how):
    assert R.align_answer(CONTEXT, text, start) == (span, how)


def squad_json(*qas, title="T", context=CONTEXT) -> list[dict]:
    return [{"title": title, "paragraphs": [{"context": context, "qas": list(qas)}]}]


def qa(qid, answers, question="Who?", **kw):
    return {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers], **kw}


def test_squad_parsing_counts_repairs_and_drops_by_question_id():
    articles = squad_json(
        qa("ok", [("Panthers", 22), ("the Panthers", 18)]),
        qa("moved", [("Denver", 40)]),
        qa("lost", [("Seahawks", 4)]),
        qa("ok", [("Panthers", 22)]),
        qa("empty", [("Panthers", 22)], question="  "),
        qa("v2", [], is_impossible=True),
    )
    for training in (True, False):
        tally = Tally()
        examples = list(R.parse_squad(articles, "d.json", 0, None, training, tally))
        c = tally.counters()
        kept = {e.qid: e for e in examples}
        assert kept["ok"].span == (22, 30) and kept["moved"].span == (49, 55) and kept["v2"].span is None
        assert kept["v2"].is_impossible and kept["ok"].answers == ["Panthers", "the Panthers"]
        assert c["answers_fixed.offset_shifted"] == 1  # "Denver" 40 -> 49
        assert c["answers_fixed.offset_shifted_whitespace_normalized"] == 1  # "the Panthers" 18 -> "the  Panthers" 17
        assert c["first_lines"]["answers_unmatched"] == ["lost"]
        assert c["examples_dropped.duplicate_id"] == 1 and c["examples_dropped.empty_question"] == 1
        assert ("lost" in kept) is (not training)  # evaluation keeps it: its answer texts still score
        assert c.get("examples_dropped.no_matching_answer", 0) == int(training)
        assert c["examples_read"] == 6 and [e.ordinal for e in examples] == sorted(e.ordinal for e in examples)


def test_articles_select_by_index_and_ordinals_count_every_article():
    articles = squad_json(qa("a0", [("Denver", 49)]), title="A") + squad_json(
        qa("b0", [("Denver", 49)]), qa("b1", []), title="B"
    )
    examples = list(R.parse_squad(articles, "d.json", 0, (1, 2), False, Tally()))
    assert [(e.qid, e.ordinal, e.title) for e in examples] == [("b0", 1, "B"), ("b1", 2, "B")]
    with pytest.raises(InputError, match="--articles 1:5 is outside its 2 articles"):
        list(R.parse_squad(articles, "d.json", 0, (1, 5), False, Tally()))
    with pytest.raises(InputError, match="not SQuAD JSON"):
        R.load_squad(b'{"version": "1.1", "rows": []}', "x.json")
