from __future__ import annotations

import hashlib
import json
import re
import string

import numpy as np
import pyarrow as pa
import pytest

from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.tasks.features import Layout
from bertstream.pipelines.tasks.read import RecordBatch
from bertstream.pipelines.tasks.squad import parse as SJ
from bertstream.pipelines.tasks.squad.featurize import ExampleFeaturizer, answer_tokens, max_context, plan_spans
from bertstream.pipelines.tokenizer.load import load_tokenizer
from bertstream.schemas import tasks as T
from tests.conftest import shared_path
from tests.jobs import run_squad
from tests.pipelines.tasks.conftest import read_examples, read_rows


def bert_doc_spans(n: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """run_squad.py's loop."""
    spans, start = [], 0
    while start < n:
        length = min(n - start, max_tokens)
        spans.append((start, start + length))
        if start + length == n:
            break
        start += min(length, stride)
    return spans


def bert_is_max_context(spans, cur, position) -> bool:
    best_score, best = None, None
    for k, (s, e) in enumerate(spans):
        if position < s or position >= e:
            continue
        score = min(position - s, e - 1 - position) + 0.01 * (e - s)
        if best_score is None or score > best_score:
            best_score, best = score, k
    return cur == best


@pytest.mark.parametrize(
    "n,max_tokens,stride", [(1, 5, 2), (10, 4, 2), (100, 30, 7), (57, 20, 20), (64, 64, 16), (9, 3, 1)]
)
def test_windows_and_max_context_follow_bert(n, max_tokens, stride):
    spans = plan_spans(n, max_tokens, stride)
    assert spans == bert_doc_spans(n, max_tokens, stride)
    masks = max_context(spans)
    for k, ((s, e), mask) in enumerate(zip(spans, masks)):
        assert mask.tolist() == [int(bert_is_max_context(spans, k, p)) for p in range(s, e)]
    assert sum(int(m.sum()) for m in masks) == n  # each token has exactly one best window
    assert plan_spans(0, 8, 4) == [(0, 0)]


def test_answer_tokens_cover_the_character_span():
    offsets = np.array([[0, 3], [4, 11], [11, 12], [13, 17]])  # "The Broncos. Wins"
    assert answer_tokens(offsets, (4, 11)) == (1, 1)
    assert answer_tokens(offsets, (4, 17)) == (1, 3)
    assert answer_tokens(offsets, (5, 8)) == (1, 1)  # inside one token
    assert answer_tokens(offsets, (12, 13)) is None  # only whitespace


def normalize_answer(s: str) -> str:
    """The official SQuAD evaluation's normalisation."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def test_articles_split_the_dev_set_without_overlap():
    articles = list(SJ.read_articles([shared_path("tasks", "squad_v1.1", "dev-v1.1.json").read_bytes()], "dev"))
    train = list(SJ.parse_squad(articles, "dev", 0, (0, 40), True, Tally()))
    evaluation = list(SJ.parse_squad(articles, "dev", 0, (40, 48), False, Tally()))
    assert len(train) + len(evaluation) == 10570 and len(evaluation) == 1589
    assert train[-1].ordinal + 1 == evaluation[0].ordinal and not {e.qid for e in train} & {e.qid for e in evaluation}


def test_squad_eval_features_map_back_to_answers(squad_eval):
    m, out = squad_eval
    assert m.kind == "squad" and m.counters["examples_read"] == m.counters["examples_used"] == 1589
    examples = read_examples(out)
    info = m.task["files"][0]
    data = (out / info["path"]).read_bytes()
    assert info["count"] == len(examples) == 1589 and info["bytes"] == len(data)
    assert info["sha256"] == hashlib.sha256(data).hexdigest()
    # The examples carry ALL answers of the source, as given.
    source = {
        q["id"]: q
        for a in json.loads(shared_path("tasks", "squad_v1.1", "dev-v1.1.json").read_text())["data"][40:48]
        for p in a["paragraphs"]
        for q in p["qas"]
    }
    assert [e["example_index"] for e in examples] == list(range(1589))
    for e in examples:
        assert e["answers"]["text"] == [a["text"] for a in source[e["id"]]["answers"]]
    for s in m.shards:
        assert T.check_schema(pa.ipc.open_file(out / s.path).schema, T.SQUAD, T.SPANS) == "uint16"
    rows = read_rows(out, m).to_pylist()
    assert len(rows) == m.totals["rows"] > 1589  # short windows: most contexts need several
    boundary = set(m.counters["first_lines"].get("answers_not_on_token_boundary", []))
    found = set()
    best_count = {}
    for r in rows:
        e = examples[r["example_index"]]
        assert e["id"] == r["example_id"] and len(r["input_ids"]) <= 128
        seg = r["segment_a_length"]
        assert r["offset_start"][:seg] == [-1] * seg and r["offset_end"][-1] == -1
        assert r["input_ids"][seg - 1] == r["input_ids"][-1] == m.vocab["special_ids"]["[SEP]"]
        start, end = r["start_position"], r["end_position"]
        span = e["answer_span"]
        # Does the (first aligned) answer lie inside this window?
        ctx = [(a, b) for a, b in zip(r["offset_start"], r["offset_end"]) if a >= 0]
        inside = span is not None and ctx[0][0] <= span[0] and span[1] <= ctx[-1][1]
        if inside:
            assert seg <= start <= end < len(r["input_ids"]) - 1
            text = e["context"][r["offset_start"][start] : r["offset_end"][end]]
            if e["id"] in boundary:
                assert normalize_answer(e["context"][span[0] : span[1]]) in normalize_answer(text)
            else:
                assert normalize_answer(text) in {normalize_answer(a) for a in e["answers"]["text"]}
            found.add(e["id"])
        else:
            assert start == end == 0
        for i, flag in enumerate(r["max_context"]):
            if flag:
                key = (e["id"], r["offset_start"][i])
                best_count[key] = best_count.get(key, 0) + 1
    assert len(found) == 1589  # every answer lies entirely inside at least one window
    assert set(best_count.values()) == {1}  # each context token: exactly one maximal-context window


def test_squad_v2_impossible_questions_and_training_drops(tmp_path, demo_vocab):
    context = "Python was created by Guido van Rossum. The first release was in 1991."
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "Python",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": "q1",
                                "question": "Who created Python?",
                                "is_impossible": False,
                                "answers": [{"text": "Guido van Rossum", "answer_start": 22}],
                            },
                            {
                                "id": "q2",
                                "question": "Who created Java?",
                                "is_impossible": True,
                                "answers": [],
                                "plausible_answers": [{"text": "Guido van Rossum", "answer_start": 22}],
                            },
                            {
                                "id": "q3",
                                "question": "When was the first release?",
                                "is_impossible": False,
                                "answers": [{"text": "1991", "answer_start": 60}],
                            },  # offset off by 6: repaired
                            {
                                "id": "q4",
                                "question": "Which year?",
                                "is_impossible": False,
                                "answers": [{"text": "2008", "answer_start": 60}],
                            },  # not in the context
                        ],
                    }
                ],
            }
        ],
    }
    src = tmp_path / "train-v2.0.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "out"
    m = run_squad(
        inputs=[str(src)],
        vocab=str(demo_vocab / "vocab.txt"),
        output=str(out),
        max_seq_length=32,
        doc_stride=8,
        max_query_length=12,
    ).manifest
    assert m.task["training"] is True and m.task["split"] == "train"
    c = m.counters
    assert c["examples_read"] == 4 and c["examples_used"] == 3 and c["examples_impossible"] == 1
    assert c["first_lines"]["examples_dropped.no_matching_answer"] == ["q4"]
    assert c["first_lines"]["answers_fixed.offset_shifted"] == ["q3"]
    rows = read_rows(out, m).to_pylist()
    examples = read_examples(out)
    assert [e["id"] for e in examples] == ["q1", "q2", "q3"]
    by_id: dict[str, list] = {}
    for r in rows:
        by_id.setdefault(r["example_id"], []).append(r)
    assert all(r["start_position"] == r["end_position"] == 0 and r["is_impossible"] for r in by_id["q2"])
    for qid, answer in (("q1", "Guido van Rossum"), ("q3", "1991")):
        ctx = examples[by_id[qid][0]["example_index"]]["context"]
        hits = [
            ctx[r["offset_start"][r["start_position"]] : r["offset_end"][r["end_position"]]]
            for r in by_id[qid]
            if r["start_position"]
        ]
        assert hits and set(hits) == {answer}
        assert not any(r["is_impossible"] for r in by_id[qid])


def test_a_context_of_more_windows_than_a_row_id_holds_is_one_line(demo_vocab, monkeypatch):
    """A ValueError with a details log before (a long context at --doc-stride 1)."""
    monkeypatch.setattr(T, "MAX_WINDOWS", 2)
    f = ExampleFeaturizer(
        load_tokenizer(str(demo_vocab / "vocab.txt")), max_seq_length=16, doc_stride=1, max_query_length=4
    )
    ex = SJ.QAExample(0, "q1", "t", "list " * 40, "which list?", ["list"], [0], (0, 4), False)
    with pytest.raises(InputError, match="f.json: question q1's context: \\d+ windows, more than a row id holds"):
        f(RecordBatch(0, "f.json", 0, [ex]), [], Layout({0: 0}, 1), Tally())
