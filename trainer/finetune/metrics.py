"""Task metrics as the benchmarks define them; numpy only (no sklearn, scipy or seqeval).

Scale: every metric is a fraction in [0, 1] (as sklearn and seqeval return them), SQuAD's exact match and F1
too: the official evaluation script prints them as percentages (0-100), which are these times 100 (one scale in
results.json and the summaries: an accuracy of 0.9 beside an F1 of 88.5 read as two kinds of number).

- accuracy; F1 of the positive class (GLUE MRPC and QQP: label ``"1"``); Matthews correlation (CoLA),
  sklearn's multiclass formula; Pearson and Spearman (STS-B), Spearman with average ranks for ties.
  An undefined correlation (a constant input) is reported as 0.0, the convention sklearn uses for MCC.
- NER: entity-level precision/recall/F1 as ``conlleval`` counts them: chunks (type, start, end) from IOB
  tags per sentence, where a chunk also starts at an ``I-X`` that follows ``O`` or another type (conlleval's
  ``startOfChunk``); a predicted chunk is correct only when its span and type equal a gold chunk's;
  micro-averaged over all sentences. Token accuracy counts every word.
- SQuAD v1.1: the official ``evaluate-v1.1.py``: answers normalised (lowercase, punctuation removed,
  articles a/an/the removed, whitespace collapsed); exact match and bag-of-tokens F1, each the maximum
  over all gold answers, averaged over every question.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = [
    "accuracy",
    "binary_f1",
    "chunks",
    "conll_scores",
    "matthews_corrcoef",
    "normalize_answer",
    "pearson",
    "spearman",
    "squad_exact_match",
    "squad_f1",
    "squad_scores",
]


# ------------------------------------------------------------------------------- classification/regression


def accuracy(pred: Sequence[int] | np.ndarray, gold: Sequence[int] | np.ndarray) -> float:
    p, g = np.asarray(pred), np.asarray(gold)
    _same_length(p, g)
    return float((p == g).mean()) if len(g) else 0.0


def binary_f1(pred: Sequence[int] | np.ndarray, gold: Sequence[int] | np.ndarray, positive: int) -> float:
    """F1 of class ``positive``: 2 TP / (2 TP + FP + FN); 0.0 when there is neither a positive nor a guess."""
    p, g = np.asarray(pred) == positive, np.asarray(gold) == positive
    _same_length(p, g)
    tp, fp, fn = int((p & g).sum()), int((p & ~g).sum()), int((~p & g).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def matthews_corrcoef(pred: Sequence[int] | np.ndarray, gold: Sequence[int] | np.ndarray) -> float:
    """(c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)) over the confusion matrix (sklearn's K-class form);
    binary data gives the familiar (TP*TN - FP*FN) / sqrt(...)."""
    p, g = np.asarray(pred, dtype=np.int64), np.asarray(gold, dtype=np.int64)
    _same_length(p, g)
    if not len(g):
        return 0.0
    classes, inverse = np.unique(np.concatenate([g, p]), return_inverse=True)
    k = len(classes)
    cm = np.zeros((k, k), dtype=np.float64)
    np.add.at(cm, (inverse[: len(g)], inverse[len(g) :]), 1.0)  # rows gold, columns predicted
    t, pk, c, s = cm.sum(1), cm.sum(0), np.trace(cm), cm.sum()
    denom = np.sqrt((s * s - pk @ pk) * (s * s - t @ t))
    return float((c * s - t @ pk) / denom) if denom > 0 else 0.0


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    _same_length(a, b)
    if len(a) < 2:
        return 0.0
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a @ a) * (b @ b))
    return float(a @ b / denom) if denom > 0 else 0.0


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span (scipy's rankdata 'average')."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # boundaries of runs of equal values
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x), dtype=np.float64)
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + 1 + e) / 2.0  # mean of s+1 .. e
    return ranks


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    _same_length(a, b)
    return pearson(_average_ranks(a), _average_ranks(b))


def _same_length(a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        raise ValueError(f"predictions and gold labels differ in shape: {a.shape} vs {b.shape}")


# --------------------------------------------------------------------------------------------------- NER


def _split_tag(tag: str) -> tuple[str, str]:
    # conlleval: /^([^-]*)-(.*)$/ gives (prefix, type); anything else (O) has no type
    prefix, dash, kind = tag.partition("-")
    return (prefix, kind) if dash else (tag, "")


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    # conlleval's endOfChunk, rule for rule (its bracket rules aside)
    if (prev_tag, tag) in {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}:
        return True
    return prev_tag not in ("O", ".") and prev_type != kind


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    # conlleval's startOfChunk: an I- after O (or after another type) opens a chunk
    if (prev_tag, tag) in {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}:
        return True
    return tag not in ("O", ".") and prev_type != kind


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(type, first, last)`` (inclusive word indices) of every chunk of one sentence, as conlleval."""
    out: list[tuple[str, int, int]] = []
    prev_tag, prev_type, start = "O", "", -1
    for i, tag in enumerate([*tags, "O"]):  # the sentence boundary closes an open chunk
        t, kind = _split_tag(tag)
        if start >= 0 and _end_of_chunk(prev_tag, t, prev_type, kind):
            out.append((prev_type, start, i - 1))
            start = -1
        if i < len(tags) and _start_of_chunk(prev_tag, t, prev_type, kind):
            start = i
        prev_tag, prev_type = t, kind
    return out


def conll_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Entity-level micro precision/recall/F1 over sentences of word tags, plus token accuracy and per type."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    found_gold = found_pred = correct = tokens = correct_tokens = 0
    per_type: dict[str, list[int]] = {}  # type -> [gold, pred, correct]
    for n, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {n}: {len(g)} gold tags but {len(p)} predicted")
        gc, pc = set(chunks(g)), set(chunks(p))
        found_gold, found_pred, correct = found_gold + len(gc), found_pred + len(pc), correct + len(gc & pc)
        for c in gc:
            per_type.setdefault(c[0], [0, 0, 0])[0] += 1
        for c in pc:
            per_type.setdefault(c[0], [0, 0, 0])[1] += 1
        for c in gc & pc:
            per_type[c[0]][2] += 1
        tokens += len(g)
        correct_tokens += sum(a == b for a, b in zip(g, p))

    def prf(n_gold: int, n_pred: int, n_correct: int) -> dict[str, float]:
        precision = n_correct / n_pred if n_pred else 0.0
        recall = n_correct / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1}

    return {
        **prf(found_gold, found_pred, correct),
        "accuracy": correct_tokens / tokens if tokens else 0.0,
        "gold_entities": found_gold,
        "predicted_entities": found_pred,
        "correct_entities": correct,
        "sentences": len(gold),
        "words": tokens,
        "per_type": {k: {**prf(*v), "gold": v[0]} for k, v in sorted(per_type.items())},
    }


# ------------------------------------------------------------------------------------------------- SQuAD

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lowercase, remove punctuation, articles and extra whitespace (official SQuAD v1.1, same order)."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def squad_f1(prediction: str, ground_truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(ground_truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_exact_match(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def squad_scores(predictions: dict[str, str], answers: dict[str, Sequence[str]]) -> dict[str, float]:
    """``{"exact_match", "f1"}`` as fractions over every question of ``answers`` (id -> gold texts);
    a question without a prediction scores 0, as in the official script."""
    em = f1 = 0.0
    for qid, golds in answers.items():
        if not golds:
            raise ValueError(f"question {qid} has no gold answer (SQuAD v2.0 unanswerable questions are not scored)")
        if qid not in predictions:
            continue
        pred = predictions[qid]
        em += max(squad_exact_match(pred, g) for g in golds)
        f1 += max(squad_f1(pred, g) for g in golds)
    n = len(answers)
    return {"exact_match": em / n if n else 0.0, "f1": f1 / n if n else 0.0, "questions": n}
