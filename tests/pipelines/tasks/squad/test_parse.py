from __future__ import annotations

import pytest

from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.tasks.squad import parse as SJ

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
    assert SJ.align_answer(CONTEXT, text, start) == (span, how)


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
        examples = list(SJ.parse_squad(articles, "d.json", 0, None, training, tally))
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
    examples = list(SJ.parse_squad(articles, "d.json", 0, (1, 2), False, Tally()))
    assert [(e.qid, e.ordinal, e.title) for e in examples] == [("b0", 1, "B"), ("b1", 2, "B")]
    with pytest.raises(InputError, match="--articles 1:5 is outside its 2 articles"):
        list(SJ.parse_squad(articles, "d.json", 0, (1, 5), False, Tally()))
    with pytest.raises(InputError, match="not SQuAD JSON"):
        SJ.load_squad(b'{"version": "1.1", "rows": []}', "x.json")
