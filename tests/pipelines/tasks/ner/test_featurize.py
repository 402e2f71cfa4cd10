from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.tasks import read as R
from bertstream.pipelines.tasks.features import Layout
from bertstream.pipelines.tasks.ner import parse as CN
from bertstream.pipelines.tasks.ner.featurize import SentenceFeaturizer, ownership, plan_windows
from bertstream.pipelines.tokenizer.load import load_tokenizer
from bertstream.schemas import tasks as T
from tests.conftest import shared_path
from tests.pipelines.tasks.conftest import read_rows


@pytest.mark.parametrize("seed", range(20))
def test_windows_progress_stay_in_budget_and_owners_partition_the_words(seed):
    rng = np.random.default_rng(seed)
    budget = int(rng.integers(4, 40))
    counts = rng.integers(1, budget + 1, size=int(rng.integers(1, 200)))
    overlap = int(rng.integers(0, budget // 2 + 1))
    windows = plan_windows(counts, budget, overlap)
    assert windows[0][0] == 0 and windows[-1][1] == len(counts)
    for (s, e), (s2, e2) in zip(windows, windows[1:]):
        assert s < s2 <= e < e2  # progress, no gap
    for s, e in windows:
        assert counts[s:e].sum() <= budget and e > s
    owned = ownership(windows)
    assert owned[0][0] == 0 and owned[-1][1] == len(counts)
    for (os_, oe), (s, e) in zip(owned, windows):
        assert s <= os_ < oe <= e
    assert all(a[1] == b[0] for a, b in zip(owned, owned[1:]))


def test_overlap_is_kept_when_words_fit():
    assert plan_windows([1] * 10, 4, 2) == [(0, 4), (2, 6), (4, 8), (6, 10)]
    assert ownership([(0, 4), (2, 6), (4, 8), (6, 10)]) == [(0, 3), (3, 5), (5, 7), (7, 10)]
    assert plan_windows([1] * 3, 4, 2) == [(0, 3)]
    with pytest.raises(ValueError, match="exceeds"):
        plan_windows([5], 4, 0)


def featurize(spec, sentences, labels, *, training=True, max_seq_length=16, overlap=2):
    tally = Tally()
    f = SentenceFeaturizer(
        spec, max_seq_length=max_seq_length, window_overlap=overlap, training=training, label_source="test"
    )
    return f(R.RecordBatch(0, "t.txt", 0, sentences), labels, Layout({0: 0}, len(sentences)), tally), tally


def test_tags_on_first_sub_tokens_unk_for_empty_words_and_unknown_tags(demo_vocab):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    labels = ["B-ORG", "B-PER", "I-PER", "O"]
    s = CN.Sentence(
        3, ["Guido", "van", "Rossum", "\u200b", "wrote", "Python"], ["B-PER", "I-PER", "I-PER", "O", "O", "B-ORG"]
    )
    t, tally = featurize(spec, [s], labels, max_seq_length=64)
    row = t.to_pylist()[0]
    first = [i for i, w in enumerate(row["word_ids"]) if w >= 0 and (i == 0 or row["word_ids"][i - 1] != w)]
    assert [row["word_ids"][i] for i in first] == list(range(6))
    assert [row["labels"][i] for i in first] == [labels.index(x) for x in s.tags]
    assert all(row["labels"][i] == T.IGNORE_INDEX for i in range(len(row["labels"])) if i not in first)
    assert row["input_ids"][first[3]] == spec.vocab.id("[UNK]") and row["owned"] == [0] + [1] * (
        len(row["owned"]) - 2
    ) + [0]
    assert tally.counters()["first_lines"]["words_without_tokens_as_unk"] == ["t.txt:6"]
    bad = CN.Sentence(9, ["Oslo"], ["B-LOC"])
    t, tally = featurize(spec, [s, bad], labels)
    assert tally.counters()["first_lines"]["sentences_dropped.tag_not_in_set"] == ["t.txt:9"]
    with pytest.raises(InputError, match="t.txt:9: label 'B-LOC' is not in the label set"):
        featurize(spec, [s, bad], labels, training=False)


def test_conll_valid_every_sentence_every_word_once_with_its_tag(conll_valid):
    m, out = conll_valid
    assert m.kind == "ner" and m.task["training"] is False
    assert m.counters["sentences_read"] == m.counters["sentences_used"] == 3250
    labels = m.task["labels"]
    assert labels == sorted(labels) and "O" in labels and m.task["label_source"].startswith("manifest:")
    assert m.counters["sentences_split_into_windows"] > 100  # max_seq_length 24 splits many sentences
    rows = read_rows(out, m)
    for s in m.shards:
        assert T.check_schema(pa.ipc.open_file(out / s.path).schema, T.NER, T.TOKEN_LABELS) == "uint16"
    # Gold tags straight from the file, to compare with what the shards say.
    gold = [
        s.tags
        for s in CN.parse_conll(
            shared_path("tasks", "conll2003", "valid.txt").read_text().split("\n"), "v", 0, "iob2", Tally()
        )
    ]
    assert len(gold) == 3250
    merged: dict[int, list] = {}
    sentence_of_row = [(rid >> 16) for rid in rows.column(T.ROW_ID).to_pylist()]
    for key, r in zip(sentence_of_row, rows.to_pylist()):
        words = merged.setdefault(key, [None] * r["num_words"])
        for i, (w, lab, own) in enumerate(zip(r["word_ids"], r["labels"], r["owned"])):
            if w >= 0 and lab != T.IGNORE_INDEX:  # first sub-token of word w
                assert r["word_ids"][i - 1] != w
                if own:
                    assert words[w] is None, "a word owned twice"
                    words[w] = labels[lab]
        assert len(r["input_ids"]) <= 24 and r["input_ids"][0] == m.vocab["special_ids"]["[CLS]"]
    assert list(merged) == sorted(merged)  # manifest order is input order
    assert [merged[k] for k in merged] == gold  # every word exactly once, with its tag


def test_a_sentence_of_more_windows_than_a_row_id_holds_is_one_line(demo_vocab, monkeypatch):
    """It was a ValueError, which the command showed with a details log (71,429 windows: a 4 MB char-tag file of
    one sentence at --max-seq-length 16)."""
    monkeypatch.setattr(T, "MAX_WINDOWS", 2)
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    s = CN.Sentence(1, ["list"] * 40, ["O"] * 40)
    with pytest.raises(InputError, match=r"t.txt:1: a sentence of 40 words: \d+ windows, more than a row id holds"):
        featurize(spec, [s], ["O"], overlap=0)
