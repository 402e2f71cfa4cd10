"""Metric functions against values computed by hand (comments show the arithmetic)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertstream.trainer.finetune import metrics as M


def test_accuracy_and_positive_class_f1():
    pred, gold = [1, 1, 1, 0, 0, 0, 1, 0], [1, 1, 0, 0, 0, 1, 1, 0]
    assert M.accuracy(pred, gold) == 6 / 8
    # positive 1: TP 3 (0, 1, 6), FP 1 (2), FN 1 (5) -> 2*3 / (6 + 1 + 1)
    assert M.binary_f1(pred, gold, positive=1) == pytest.approx(6 / 8)
    # positive 0: TP 3 (3, 4, 7), FP 1 (5), FN 1 (2)
    assert M.binary_f1(pred, gold, positive=0) == pytest.approx(6 / 8)
    assert M.binary_f1([0, 0], [0, 0], positive=1) == 0.0  # no positive anywhere: 0, not a division by zero
    with pytest.raises(ValueError, match="shape"):
        M.accuracy([1, 0], [1])


def test_matthews_binary_multiclass_and_degenerate():
    # TP 3, TN 3, FP 1, FN 1: (3*3 - 1*1) / sqrt(4*4*4*4) = 8 / 16
    assert M.matthews_corrcoef([1, 1, 1, 0, 0, 0, 1, 0], [1, 1, 0, 0, 0, 1, 1, 0]) == pytest.approx(0.5)
    # 3 classes. gold 0 0 1 1 2 2, pred 0 1 1 1 2 0: confusion (rows gold) [[1,1,0],[0,2,0],[1,0,1]]
    # t = (2, 2, 2), p = (2, 3, 1), c = 4, s = 6: (4*6 - (4+6+2)) / sqrt((36 - (4+9+1)) * (36 - 12)) = 12 / sqrt(22*24)
    assert M.matthews_corrcoef([0, 1, 1, 1, 2, 0], [0, 0, 1, 1, 2, 2]) == pytest.approx(12 / math.sqrt(22 * 24))
    assert M.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0  # constant prediction: undefined -> 0 (sklearn)
    assert M.matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_pearson_and_spearman_with_ties():
    # x - mean = (-1.5, -.5, .5, 1.5), y - mean = (-1.5, .5, -.5, 1.5): 4 / sqrt(5 * 5)
    assert M.pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    # ranks of x with a tie: (1, 2.5, 2.5, 4); of y: (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5)
    assert M.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    # monotone but not linear: Spearman 1, Pearson below 1
    x = np.array([0.1, 0.2, 0.5, 3.0, 10.0])
    assert M.spearman(x, x**3) == pytest.approx(1.0) and M.pearson(x, x**3) < 0.99
    # all tied on one side: undefined -> 0
    assert M.spearman([1, 1, 1], [1, 2, 3]) == 0.0 and M.pearson([2, 2], [1, 3]) == 0.0
    # three-way tie in the middle: ranks (1, 3, 3, 3, 5)
    assert M._average_ranks(np.array([0.0, 7, 7, 7, 9])).tolist() == [1, 3, 3, 3, 5]


def test_chunks_follow_conlleval():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "O", "B-MISC"]
    # I-LOC after O opens a chunk; B-LOC after I-LOC closes it; I-ORG after B-LOC is a new chunk (type change);
    # the sentence end closes the last chunk
    assert M.chunks(tags) == [("PER", 0, 1), ("LOC", 3, 4), ("LOC", 5, 5), ("ORG", 6, 6), ("MISC", 8, 8)]
    assert M.chunks(["I-PER", "B-PER", "B-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 1), ("PER", 2, 3)]
    assert M.chunks(["B-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]
    assert M.chunks(["O", "O"]) == [] and M.chunks([]) == []


def test_conll_scores_micro_average_over_sentences():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "O"], ["B-PER", "I-PER"]]
    pred = [
        ["B-PER", "O", "O", "B-LOC"],  # PER 0-0 is wrong (gold 0-1); LOC right
        ["I-ORG", "I-ORG", "O"],  # I- opening a chunk: ORG 0-1 equals gold -> correct
        ["B-PER", "I-LOC"],
    ]  # type change splits: PER 0-0 and LOC 1-1, both wrong
    s = M.conll_scores(gold, pred)
    # gold chunks 4, predicted 5, correct 2 -> P 2/5, R 2/4, F1 2PR/(P+R)
    assert (s["gold_entities"], s["predicted_entities"], s["correct_entities"]) == (4, 5, 2)
    assert s["precision"] == pytest.approx(0.4) and s["recall"] == pytest.approx(0.5)
    assert s["f1"] == pytest.approx(2 * 0.4 * 0.5 / 0.9)
    assert s["accuracy"] == pytest.approx(6 / 9)  # one word of each sentence differs
    assert s["per_type"]["ORG"]["f1"] == 1.0 and s["per_type"]["PER"]["f1"] == 0.0
    assert s["per_type"]["LOC"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "gold": 1}
    empty = M.conll_scores([["O"]], [["O"]])
    assert empty["f1"] == 0.0 and empty["accuracy"] == 1.0
    with pytest.raises(ValueError, match="sentence 0"):
        M.conll_scores([["O", "O"]], [["O"]])


def test_squad_normalisation_matches_the_official_script():
    assert M.normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert M.normalize_answer("an apple, a pear and THE fig") == "apple pear and fig"
    assert M.normalize_answer("Theatre another") == "theatre another"  # articles only as whole words
    assert M.normalize_answer("the-end") == "theend"  # punctuation goes first, so no article is left
    assert M.normalize_answer("  U.S.  ") == "us"
    assert M.normalize_answer("Ångström café") == "ångström café"  # non-ASCII kept, only lowercased


def test_squad_exact_match_and_f1():
    assert M.squad_exact_match("the Denver Broncos", "Denver Broncos.") == 1.0
    assert M.squad_f1("Denver", "Denver Broncos") == pytest.approx(2 / 3)  # P 1, R 1/2
    # bag of tokens with multiplicity: common = {a:1... } -> "b b c" vs "b c c": common b1 c1 = 2, P = R = 2/3
    assert M.squad_f1("b b c", "b c c") == pytest.approx(2 / 3)
    assert M.squad_f1("", "Denver") == 0.0 and M.squad_f1("the", "a") == 0.0  # v1.1: no common token -> 0
    scores = M.squad_scores(
        {"q1": "Denver", "q2": "Santa Clara"},
        {"q1": ["Broncos", "Denver Broncos"], "q2": ["Santa Clara, California"], "q3": ["x"]},
    )
    # q1: EM 0, F1 max(0, 2/3); q2: EM 0, F1 P 1 R 2/3 -> 0.8; q3 unanswered: 0
    assert scores["exact_match"] == 0.0
    assert scores["f1"] == pytest.approx((2 / 3 + 0.8) / 3)
    assert scores["questions"] == 3
    assert M.squad_scores({"q": "Denver Broncos"}, {"q": ["Broncos", "the denver broncos"]})["exact_match"] == 1.0
