"""NER window merge on real CoNLL windows: each word predicted once, from its owning window's first sub-token."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bertstream.schemas import tasks as T
from bertstream.trainer.finetune import metrics as M
from bertstream.trainer.finetune.data import TaskDataError, load_task_data
from bertstream.trainer.finetune.ner import conll_text, sentence_tags, sentence_words
from bertstream.trainer.finetune.tasks import get_task
from tests.trainer.finetune.conftest import conll_sentences


def oracle_logits(data, wrong_elsewhere: bool) -> list[np.ndarray]:
    """Logits that favour the gold tag on each owned first sub-token and, optionally, a WRONG tag on every other
    token (non-owned copies of overlapping words included): only the owned first sub-tokens may be read."""
    c, n = data.columns, len(data.labels)
    out = []
    for i in range(len(data)):
        labels, owned = c[T.LABELS][i], c[T.OWNED][i]
        logits = np.zeros((len(labels), n), dtype=np.float32)
        read = (labels != T.IGNORE_INDEX) & (owned == 1)
        logits[np.flatnonzero(read), labels[read]] = 5.0
        if wrong_elsewhere:
            other = np.flatnonzero(~read)
            wrong = np.where(labels[~read] >= 0, (labels[~read] + 1) % n, 1)
            logits[other, wrong] = 9.0
        out.append(logits)
    return out


def test_owned_first_subtokens_give_one_tag_per_word(conll):
    data = load_task_data(str(conll["valid"]), get_task(T.NER))
    split = sum(int(w) > 0 for w in data.columns[T.WINDOW])
    assert split > 20  # many sentences span several overlapping windows
    sentences = sentence_tags(data, oracle_logits(data, wrong_elsewhere=True))
    gold_file = conll_sentences(conll["valid"].parent / "valid.txt")
    assert [len(s.gold) for s in sentences] == [len(g) for g in gold_file]
    assert [[data.labels[t] for t in s.gold] for s in sentences] == [[t for _, t in g] for g in gold_file]
    assert all(np.array_equal(s.gold, s.pred) for s in sentences)  # wrong logits elsewhere were never read
    words, source = sentence_words(data, sentences)
    assert source == "input" and words == [[w for w, _ in g] for g in gold_file]
    text = conll_text(words, sentences, data.labels)
    gold_tags = [[data.labels[t] for t in s.gold] for s in sentences]
    assert M.conll_scores(gold_tags, gold_tags)["f1"] == 1.0
    assert text.splitlines()[0] == f"{gold_file[0][0][0]} {gold_file[0][0][1]} {gold_file[0][0][1]}"
    assert text.count("\n\n") == len(sentences)


def test_word_text_falls_back_to_wordpieces_without_the_input(conll):
    data = load_task_data(str(conll["valid"]), get_task(T.NER))
    moved = dataclasses.replace(data.manifest, inputs=({"path": "/nonexistent/valid.txt", "bytes": 0},))
    data = dataclasses.replace(data, manifest=moved)
    sentences = sentence_tags(data, oracle_logits(data, wrong_elsewhere=False))
    words, source = sentence_words(data, sentences)
    gold_file = conll_sentences(conll["valid"].parent / "valid.txt")
    assert source == "wordpiece"
    assert [len(w) for w in words] == [len(g) for g in gold_file]
    # uncased WordPiece text: the lowercased word, unless it holds characters the vocabulary lacks
    same = sum(w == g.lower() for ws, gs in zip(words, gold_file) for w, (g, _) in zip(ws, gs))
    assert same / sum(map(len, gold_file)) > 0.95


def test_a_word_owned_twice_is_an_error(conll):
    data = load_task_data(str(conll["valid"]), get_task(T.NER))
    c = data.columns
    i = next(i for i in range(len(data)) if int(c[T.WINDOW][i]) == 1)  # a second window: overlaps the first
    owned = c[T.OWNED].values.copy()
    owned[c[T.OWNED].offsets[i] : c[T.OWNED].offsets[i + 1]] = (c[T.WORD_IDS][i] >= 0).astype(np.int8)
    broken = dataclasses.replace(data, columns={**c, T.OWNED: dataclasses.replace(c[T.OWNED], values=owned)})
    with pytest.raises(TaskDataError, match="already owned by another window"):
        sentence_tags(broken, oracle_logits(data, wrong_elsewhere=False))
