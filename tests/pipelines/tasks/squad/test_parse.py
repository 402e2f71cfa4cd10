from __future__ import annotations

import json
from functools import partial

import pytest

from bertstream.pipelines.common import files
from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.tasks import read as R
from bertstream.pipelines.tasks.squad import parse as SJ
from tests.conftest import shared_path

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
        ("Denver", 10**30, None, "unmatched"),  # OverflowError (a details log) before
        ("Denver", -(10**30), (49, 55), "offset_shifted"),
        ("Denver", len(CONTEXT) + 150, (49, 55), "offset_shifted"),  # within NEARBY_CHARS of the end
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
        list(SJ.read_articles([b'{"version": "1.1", "rows": []}'], "x.json"))


BLOCK = 64 << 10


def test_the_dev_set_is_read_an_article_at_a_time_into_the_examples_of_the_whole_file(monkeypatch):
    # Read in 64 KiB blocks under a cap of 256 KiB, 1/18 of the file (its largest article holds about 247 KB).
    monkeypatch.setattr(R, "read_chunks", partial(files.read_chunks, block_bytes=BLOCK))
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 256 << 10)
    path = shared_path("tasks", "squad_v1.1", "dev-v1.1.json")
    raw = path.read_bytes()
    for selection, training in ((None, False), ((40, 48), True)):
        tally = Tally()
        examples = SJ.SquadParser(selection, training)(str(path), 0, tally)
        first = next(examples)
        held = tally.counts["bytes_read"]  # read when the first example came out
        examples = [first, *examples]
        whole = Tally()
        whole.add("bytes_read", len(raw))
        expected = list(SJ.parse_squad(json.loads(raw)["data"], str(path), 0, selection, training, whole))
        assert examples == expected and tally.counters() == whole.counters() and len(examples) > 1000
        if selection is None:  # the first article (up to where the second starts) and at most one block more
            assert held <= raw.index(b'{"title": ', 11) + BLOCK < len(raw) / 10


def test_an_article_over_the_cap_is_refused_in_one_line_naming_it_and_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 4096)
    path = tmp_path / "big.json"
    articles = squad_json(qa("a", [])) + squad_json(qa("b", []), context="long " * 1000) + squad_json(qa("c", []))
    raw = json.dumps({"version": "1.1", "data": articles}).encode()
    path.write_bytes(raw)
    with pytest.raises(InputError) as e:
        list(SJ.SquadParser(None, False)(str(path), 0, Tally()))
    at = raw.index(b"{", raw.index(b"}]}]}") + 1)  # the second article
    assert str(e.value) == (
        f"cannot read {path}: article 1 (at byte {at}) holds more than 4096 bytes, the cap on one record "
        "(MAX_RECORD_BYTES): is the file what it says it is? (split the record to read it)"
    )


def read_whole(raw: bytes, path: str) -> list[dict]:
    """The former reader: the file decoded and parsed whole, then its shape checked."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not SQuAD JSON ({type(e).__name__}: {e})") from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list) or not all(
        isinstance(a, dict) and isinstance(a.get("paragraphs"), list) for a in articles
    ):
        raise InputError(f"{path}: not SQuAD JSON ({SJ.SHAPE})")
    return articles


@pytest.mark.parametrize(
    "raw",
    [
        b'{"data": [{"paragraphs": []}, {"paragraphs": 1}, {"paragraphs": []}]}',  # an article of another shape
        b'{"data": [5, {"paragraphs": []}], "x": tru}',  # ... and a JSON error after it: told first
        b'{"version": "1.1", "data": {"paragraphs": []}}',
        b'{"data": [{"paragraphs": []}]} ]',
        b'{"data": [{"paragraphs": [], "title": "\xff"}]}',
        b'\n[{"paragraphs": []}]',
    ],
)
def test_a_malformed_file_is_refused_as_when_it_was_read_whole(raw):
    with pytest.raises(InputError) as whole:
        read_whole(raw, "x.json")
    for size in (1, len(raw)):
        with pytest.raises(InputError) as streamed:
            list(SJ.read_articles([raw[i : i + size] for i in range(0, len(raw), size)], "x.json"))
        assert str(streamed.value) == str(whole.value)
