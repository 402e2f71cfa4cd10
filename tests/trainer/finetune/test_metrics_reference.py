"""``trainer/finetune/metrics.py`` against the reference implementations, on random and on real predictions.

References: scikit-learn (accuracy, F1, Matthews), scipy (Pearson, Spearman), seqeval in its default
(conlleval-compatible) mode (entity precision/recall/F1, token accuracy), and the official SQuAD v1.1 and
v2.0 evaluation scripts. No installable package ships the SQuAD scripts (``evaluate`` fetches them from a
hub at run time, and ``transformers.data.metrics.squad_metrics`` is gone from transformers 5), so their
normalisation/EM/F1 logic is copied below verbatim (``evaluate-v1.1.py``, ``evaluate-v2.0.py``) and used
only as the reference.

Every value agrees to 1e-9 unless a comment names the difference and why it is ours by design.
"Real" predictions are simple baselines run on the shared task data (word-overlap paraphrase detection on
MRPC, a per-word majority tagger trained on CoNLL-2003 train, spans of the real SQuAD contexts), so the
label distributions, tag sequences and answer strings are the benchmarks' own.
"""

from __future__ import annotations

import json
import re
import string
import sys
import warnings
from collections import Counter, defaultdict

import numpy as np
import pytest

from bertstream.trainer.finetune import metrics as M
from tests.conftest import shared_path
from tests.trainer.finetune.conftest import conll_sentences

sklearn_metrics = pytest.importorskip("sklearn.metrics", reason="needs scikit-learn (pip install -e '.[test]')")
stats = pytest.importorskip("scipy.stats", reason="needs scipy (pip install -e '.[test]')")
seqeval_metrics = pytest.importorskip("seqeval.metrics", reason="needs seqeval (pip install -e '.[test]')")

TOL = 1e-9


# ------------------------------------------------------------------------- official SQuAD logic (reference)
# evaluate-v1.1.py, verbatim but for names (v1_*) and the file handling.


def v1_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def v1_f1_score(prediction, ground_truth):
    prediction_tokens = v1_normalize_answer(prediction).split()
    ground_truth_tokens = v1_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def v1_exact_match_score(prediction, ground_truth):
    return v1_normalize_answer(prediction) == v1_normalize_answer(ground_truth)


def v1_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


def v1_evaluate(dataset, predictions):
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    message = "Unanswered question " + qa["id"] + " will receive score 0."
                    print(message, file=sys.stderr)
                    continue
                ground_truths = list(map(lambda x: x["text"], qa["answers"]))
                prediction = predictions[qa["id"]]
                exact_match += v1_metric_max_over_ground_truths(v1_exact_match_score, prediction, ground_truths)
                f1 += v1_metric_max_over_ground_truths(v1_f1_score, prediction, ground_truths)
    exact_match = 100.0 * exact_match / total
    f1 = 100.0 * f1 / total
    return {"exact_match": exact_match, "f1": f1}


# evaluate-v2.0.py (normalize_answer is v1.1's, word for word), verbatim but for names (v2_*).


def v2_get_tokens(s):
    if not s:
        return []
    return v1_normalize_answer(s).split()


def v2_compute_exact(a_gold, a_pred):
    return int(v1_normalize_answer(a_gold) == v1_normalize_answer(a_pred))


def v2_compute_f1(a_gold, a_pred):
    gold_toks = v2_get_tokens(a_gold)
    pred_toks = v2_get_tokens(a_pred)
    common = Counter(gold_toks) & Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def v2_get_raw_scores(dataset, preds):
    exact_scores = {}
    f1_scores = {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                gold_answers = [a["text"] for a in qa["answers"] if v1_normalize_answer(a["text"])]
                if not gold_answers:
                    # For unanswerable questions, only correct answer is empty string
                    gold_answers = [""]
                if qid not in preds:
                    print(f"Missing prediction for {qid}")
                    continue
                a_pred = preds[qid]
                # Take max over all gold answers
                exact_scores[qid] = max(v2_compute_exact(a, a_pred) for a in gold_answers)
                f1_scores[qid] = max(v2_compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


# ---------------------------------------------------------------------------------------------- helpers


def _classification_cases():
    """(pred, gold) pairs: random sizes 1..400, 2..5 classes, skewed and uniform, plus the degenerate ones."""
    rng = np.random.default_rng(20261201)
    cases = []
    for _ in range(300):
        n, k = int(rng.integers(1, 400)), int(rng.integers(2, 6))
        p = rng.dirichlet(np.ones(k) * rng.choice([0.3, 1.0, 5.0]))
        gold = rng.choice(k, size=n, p=p)
        noise = rng.random()
        pred = np.where(rng.random(n) < noise, rng.choice(k, size=n), gold)
        cases.append((pred, gold))
    cases += [
        (np.zeros(7, int), np.zeros(7, int)),  # one class everywhere
        (np.ones(5, int), np.array([0, 1, 0, 1, 1])),  # constant prediction
        (np.array([0, 1, 0, 1]), np.array([1, 0, 1, 0])),  # all wrong
        (np.array([1]), np.array([0])),
        (np.array([2, 2, 0]), np.array([0, 1, 2])),  # a predicted class that gold never has
    ]
    return cases


def _regression_cases():
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(200):
        n = int(rng.integers(3, 500))
        x = rng.normal(size=n) * rng.choice([1e-3, 1.0, 1e3])
        y = rng.random() * x + rng.normal(size=n)
        if rng.random() < 0.5:  # STS-B-like: gold in steps of 0.1 on 0..5, lots of ties on both sides
            x, y = np.round(np.clip(x, -2.5, 2.5) + 2.5, 1), np.round(y * 2) / 2
        if np.ptp(x) > 0 and np.ptp(y) > 0:  # constant inputs: test_undefined_correlation_...
            cases.append((x, y))
    return cases


def _max_abs(pairs) -> float:
    # a nan on either side (scipy's undefined correlation) counts as an infinite difference, never as 0
    return max((abs(a - b) if not (np.isnan(a) or np.isnan(b)) else np.inf for a, b in pairs), default=0.0)


def _report(name: str, diff: float) -> None:
    print(f"[metrics-reference] {name}: max |ours - reference| = {diff:.3g}")


# --------------------------------------------------------------------------- classification and regression


def test_classification_metrics_match_sklearn_on_random_predictions():
    acc, f1, mcc = [], [], []
    for pred, gold in _classification_cases():
        acc.append((M.accuracy(pred, gold), sklearn_metrics.accuracy_score(gold, pred)))
        for positive in (0, 1):
            f1.append(
                (
                    M.binary_f1(pred, gold, positive=positive),
                    sklearn_metrics.f1_score(gold, pred, labels=[positive], average="micro", zero_division=0),
                )
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn warns on its undefined-MCC cases, and returns 0.0 there
            mcc.append((M.matthews_corrcoef(pred, gold), sklearn_metrics.matthews_corrcoef(gold, pred)))
    for name, pairs in (("accuracy", acc), ("binary_f1", f1), ("matthews", mcc)):
        _report(f"{name} (random, {len(pairs)} cases)", _max_abs(pairs))
        assert _max_abs(pairs) <= TOL, name
    # the degenerate cases are in there and agree: constant prediction -> MCC 0 in both
    assert M.matthews_corrcoef(np.ones(5, int), [0, 1, 0, 1, 1]) == 0.0


def test_correlations_match_scipy_on_random_predictions_with_ties():
    pe, sp = [], []
    for x, y in _regression_cases():
        pe.append((M.pearson(x, y), stats.pearsonr(x, y)[0]))
        sp.append((M.spearman(x, y), stats.spearmanr(x, y)[0]))
    _report(f"pearson (random, {len(pe)} cases)", _max_abs(pe))
    _report(f"spearman (random, ties, {len(sp)} cases)", _max_abs(sp))
    assert len(pe) > 150 and _max_abs(pe) <= TOL and _max_abs(sp) <= TOL


def test_undefined_correlation_is_zero_where_scipy_says_nan():
    # The one difference, by design (module docstring): a constant input has no correlation; scipy returns
    # nan (with a ConstantInputWarning), we report 0.0, sklearn's convention for MCC, so that a GLUE average
    # stays a number. Every defined case agrees to 1e-9 (above).
    x, y = np.array([2.0, 2.0, 2.0, 2.0]), np.array([0.1, 0.5, 0.2, 0.9])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isnan(stats.pearsonr(x, y)[0]) and np.isnan(stats.spearmanr(x, y)[0])
    assert M.pearson(x, y) == 0.0 and M.spearman(x, y) == 0.0


def _tokens(s: str) -> set[str]:
    return set(re.findall(r"\w+", s.lower()))


def test_classification_and_correlation_match_on_real_mrpc_predictions():
    """MRPC dev (408 pairs): a word-overlap baseline's labels and scores against the real gold labels."""
    rows = shared_path("tasks", "mrpc", "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    gold, score = [], []
    for row in rows:
        label, _, _, a, b = row.split("\t")
        ta, tb = _tokens(a), _tokens(b)
        gold.append(int(label))
        score.append(len(ta & tb) / len(ta | tb))
    gold, score = np.array(gold), np.array(score)
    pred = (score > 0.5).astype(int)
    assert len(gold) == 408 and 0 < pred.sum() < len(pred)  # a real, non-degenerate prediction
    pairs = {
        "accuracy": (M.accuracy(pred, gold), sklearn_metrics.accuracy_score(gold, pred)),
        "f1(1)": (M.binary_f1(pred, gold, positive=1), sklearn_metrics.f1_score(gold, pred, pos_label=1)),
        "f1(0)": (M.binary_f1(pred, gold, positive=0), sklearn_metrics.f1_score(gold, pred, pos_label=0)),
        "matthews": (M.matthews_corrcoef(pred, gold), sklearn_metrics.matthews_corrcoef(gold, pred)),
        # score against the 0/1 gold: many ties on the gold side, some on the score side
        "pearson": (M.pearson(score, gold), stats.pearsonr(score, gold)[0]),
        "spearman": (M.spearman(score, gold), stats.spearmanr(score, gold)[0]),
    }
    for name, (ours, ref) in pairs.items():
        _report(f"{name} (MRPC dev, overlap baseline)", abs(ours - ref))
        assert abs(ours - ref) <= TOL, (name, ours, ref)
    assert 0.5 < pairs["accuracy"][0] < 0.9  # the baseline is a real one: better than chance, far from gold


# --------------------------------------------------------------------------------------------------- NER


def _seqeval(gold, pred) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # UndefinedMetricWarning when nothing is predicted
        return {
            "precision": seqeval_metrics.precision_score(gold, pred),
            "recall": seqeval_metrics.recall_score(gold, pred),
            "f1": seqeval_metrics.f1_score(gold, pred),
            "accuracy": seqeval_metrics.accuracy_score(gold, pred),
        }


def _conll_diffs(gold, pred) -> dict[str, float]:
    ours, ref = M.conll_scores(gold, pred), _seqeval(gold, pred)
    return {k: abs(ours[k] - ref[k]) for k in ref}


def _random_iob(rng, n: int, types=("PER", "LOC", "ORG")) -> list[str]:
    # ill-formed sequences on purpose: I- after O, I-X after B-Y, B-X B-X: conlleval's chunk rules all fire
    tags = ["O"] + [f"{p}-{t}" for p in "BI" for t in types]
    return [str(t) for t in rng.choice(tags, size=n, p=[0.5] + [0.5 / (len(tags) - 1)] * (len(tags) - 1))]


def test_conll_scores_match_seqeval_on_random_tags():
    rng = np.random.default_rng(13)
    worst: dict[str, float] = defaultdict(float)
    chunk_diffs = 0
    for _ in range(300):
        sentences = [int(n) for n in rng.integers(0, 25, size=int(rng.integers(1, 12)))]
        gold = [_random_iob(rng, n) for n in sentences]
        # predictions: gold with some tags replaced, so that some entities match and some do not
        pred = [[t if rng.random() < 0.7 else _random_iob(rng, 1)[0] for t in g] for g in gold]
        for k, d in _conll_diffs(gold, pred).items():
            worst[k] = max(worst[k], d)
        for g in gold:  # the chunks themselves, sentence by sentence
            ref = {(t, s, e) for t, s, e in seqeval_metrics.sequence_labeling.get_entities(g)}
            chunk_diffs += set(M.chunks(g)) != ref
    for k, d in worst.items():
        _report(f"conll {k} (random IOB tags)", d)
    assert max(worst.values()) <= TOL and chunk_diffs == 0


def test_iobes_singletons_are_conlleval_chunks_not_seqeval_ones():
    # The one difference, by design: conlleval (and so ours) knows B/I/E/O but not S-: an "S-" is a tag prefix
    # like any other, so S-PER S-PER is one chunk (same type, no rule ends it), while seqeval reads IOBES and
    # sees two. Task labels are IOB (CoNLL-2003, People's Daily), where the two agree to 1e-9 (above and below).
    tags = ["S-PER", "S-PER"]
    assert M.chunks(tags) == [("PER", 0, 1)]
    assert seqeval_metrics.sequence_labeling.get_entities(tags) == [("PER", 0, 0), ("PER", 1, 1)]


@pytest.mark.parametrize(
    "task, train, test",
    [
        ("conll2003", "train.txt", "test.txt"),
        ("peoples_daily_ner", "example.dev", "example.test"),
    ],
)
def test_conll_scores_match_seqeval_on_a_real_tagger(task, train, test):
    """A per-word majority tagger learned on one real split, scored on another (CoNLL-2003 test: 3,453
    sentences; People's Daily: character-level Chinese)."""
    train_s = conll_sentences(shared_path("tasks", task, train))
    test_s = conll_sentences(shared_path("tasks", task, test))
    counts: dict[str, Counter] = defaultdict(Counter)
    for sent in train_s:
        for w, t in sent:
            counts[w][t] += 1
    gold = [[t for _, t in s] for s in test_s]
    pred = [[counts[w].most_common(1)[0][0] if w in counts else "O" for w, _ in s] for s in test_s]
    ours = M.conll_scores(gold, pred)
    for k, d in _conll_diffs(gold, pred).items():
        _report(f"conll {k} ({task} {test}, majority tagger)", d)
        assert d <= TOL, k
    # a real tagger, neither 0 nor gold (character-level majority tags on People's Daily score about 0.11)
    assert 0.05 < ours["f1"] < 0.95 and ours["predicted_entities"] > 100
    # per type as well, against seqeval's report
    report = seqeval_metrics.classification_report(gold, pred, output_dict=True, zero_division=0)
    for kind, v in ours["per_type"].items():
        assert abs(v["f1"] - report[kind]["f1-score"]) <= TOL and v["gold"] == report[kind]["support"], kind


# ------------------------------------------------------------------------------------------------- SQuAD


@pytest.fixture(scope="module")
def squad_dev():
    return json.loads(shared_path("tasks", "squad_v1.1", "dev-v1.1.json").read_text(encoding="utf-8"))["data"]


def _squad_predictions(dataset, seed: int) -> dict[str, str]:
    """For every question: a gold answer as is, one with its case/punctuation/articles changed, a random span
    of its real context (overlapping or not), or nothing, so EM, partial F1 and 0 all occur."""
    rng = np.random.default_rng(seed)
    preds = {}
    for article in dataset:
        for p in article["paragraphs"]:
            words = p["context"].split()
            for qa in p["qas"]:
                r, gold = rng.random(), qa["answers"][int(rng.integers(len(qa["answers"])))]["text"]
                if r < 0.05:
                    continue  # unanswered: 0 in both scripts
                if r < 0.3:
                    preds[qa["id"]] = gold
                elif r < 0.45:
                    preds[qa["id"]] = f"The {gold.upper()}."
                elif r < 0.5:
                    preds[qa["id"]] = rng.choice(["", "the", "...", " a  "])  # normalise to nothing
                else:
                    start = int(rng.integers(len(words)))
                    preds[qa["id"]] = " ".join(words[start : start + int(rng.integers(1, 12))])
    return preds


def _answers(dataset) -> dict[str, list[str]]:
    return {qa["id"]: [a["text"] for a in qa["answers"]] for a in dataset for p in a["paragraphs"] for qa in p["qas"]}


def test_squad_scores_match_the_official_v11_script_on_real_data(squad_dev):
    answers = _answers(squad_dev)
    assert len(answers) == 10570
    for seed in (0, 1):
        preds = _squad_predictions(squad_dev, seed)
        ours, ref = M.squad_scores(preds, answers), v1_evaluate(squad_dev, preds)
        for k in ("exact_match", "f1"):  # ours are fractions, the script's percentages
            _report(f"squad v1.1 {k} (dev-v1.1, seed {seed}, {len(preds)} predictions)", abs(100 * ours[k] - ref[k]))
            assert abs(100 * ours[k] - ref[k]) <= TOL, (k, ours[k], ref[k])
        assert 0.2 < ours["exact_match"] < 0.6 and ours["f1"] > ours["exact_match"]
    # question by question too, so that no two errors cancel in the average
    preds = _squad_predictions(squad_dev, 2)
    for qid, pred in preds.items():
        golds = answers[qid]
        assert M.squad_exact_match(pred, golds[0]) == float(v1_exact_match_score(pred, golds[0]))
        assert (
            abs(max(M.squad_f1(pred, g) for g in golds) - v1_metric_max_over_ground_truths(v1_f1_score, pred, golds))
            <= TOL
        )
    for s in ("The  Denver Broncos!", "an apple, a pear and THE fig", "  U.S.  ", "Ångström café", "the-end"):
        assert M.normalize_answer(s) == v1_normalize_answer(s)


def test_squad_scores_against_the_official_v20_script(squad_dev):
    """v2.0 scores per question. It differs from v1.1 (and so from us; we follow v1.1, the script that
    SQuAD v1.1 results are reported with) in one place: a gold answer that normalises to nothing. v2.0 drops
    it (and when all of a question's answers are such, counts the question as unanswerable, matched only by
    an empty prediction); v1.1 keeps it, so an empty prediction is an exact match of it. dev-v1.1 has three
    such gold answers, "." (questions below); they change a score only where the prediction normalises to
    nothing too. Unanswerable questions (v2.0's empty answer list) we refuse with a clear error: the
    fine-tuning head does not predict no-answer."""
    answers = _answers(squad_dev)
    dotted = {q for q, golds in answers.items() if any(not v1_normalize_answer(a) for a in golds)}
    assert dotted == {"5725bad5271a42140099d0c1", "5730b7ce069b5314008322c4", "57340d124776f419006617bf"}
    preds = _squad_predictions(squad_dev, 3)
    for q in dotted:
        preds[q] = "the"  # an answer that normalises to nothing, on each of them
    exact, f1 = v2_get_raw_scores(squad_dev, preds)
    assert len(exact) == len(preds)

    def ours(q):
        return (
            max(M.squad_exact_match(preds[q], g) for g in answers[q]),
            max(M.squad_f1(preds[q], g) for g in answers[q]),
        )

    diffs_em = [abs(ours(q)[0] - exact[q]) for q in exact if q not in dotted]
    diffs_f1 = [abs(ours(q)[1] - f1[q]) for q in exact if q not in dotted]
    _report(f"squad v2.0 exact (per question, dev-v1.1, {len(diffs_em)} questions)", max(diffs_em))
    _report(f"squad v2.0 f1 (per question, dev-v1.1, {len(diffs_f1)} questions)", max(diffs_f1))
    assert max(diffs_em) <= TOL and max(diffs_f1) <= TOL
    for q in dotted:  # the first (and only) difference: v1.1 and we give EM 1, v2.0 gives 0
        assert ours(q) == (1.0, 0.0) and (exact[q], f1[q]) == (0, 0), q
        assert v1_metric_max_over_ground_truths(v1_exact_match_score, preds[q], answers[q]) is True
    # aggregate as v2.0's make_eval_dict does (over every question, missing ones counted as 0), less the 3
    agg = M.squad_scores(preds, answers)
    assert abs(agg["exact_match"] - (sum(exact.values()) + len(dotted)) / len(answers)) <= TOL
    assert abs(agg["f1"] - sum(f1.values()) / len(answers)) <= TOL
    with pytest.raises(ValueError, match="no gold answer"):
        M.squad_scores({"q": ""}, {"q": []})
