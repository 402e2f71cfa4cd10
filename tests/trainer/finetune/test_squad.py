"""Span decoding: the best valid span across windows, within the max length, started in a max-context window."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bertstream.trainer.finetune.squad import Window, best_span, predict_answers

#          0      1     2      3    4        5      6         7
# tokens: [CLS]  who   [SEP]  The  Broncos  won   tonight   [SEP]
CONTEXT = "The Broncos won tonight"
STARTS = np.array([-1, -1, -1, 0, 4, 12, 16, -1])
ENDS = np.array([-1, -1, -1, 3, 11, 15, 23, -1])


def window(start, end, max_context=(0, 0, 0, 1, 1, 1, 1, 0)) -> Window:
    return Window(
        np.array(start, dtype=np.float32),
        np.array(end, dtype=np.float32),
        STARTS,
        ENDS,
        np.array(max_context, dtype=np.int8),
    )


def test_question_and_special_tokens_are_never_answers():
    # the highest start and end logits sit on [CLS] and the question: the best CONTEXT span wins
    w = window([9, 9, 0, 1, 5, 0, 0, 0], [9, 0, 9, 0, 0, 6, 1, 0])
    span = best_span([w])
    assert (span.start, span.end) == (4, 5) and span.score == 11
    assert span.text(CONTEXT, [w]) == "Broncos won"


def test_end_before_start_and_too_long_spans_are_skipped():
    w = window([0, 0, 0, 0, 0, 0, 9, 0], [0, 0, 0, 8, 1, 0, -9, 0])  # best pair (6, 3) has end < start: 17
    span = best_span([w])
    assert (span.start, span.end, span.score) == (3, 3, 8)  # 0 + 8 beats (6, 6): 9 - 9
    w = window([0, 0, 0, 9, 0, 0, 0, 0], [0, 0, 0, 0, 5, 0, 9, 0])
    assert (best_span([w]).start, best_span([w]).end) == (3, 6)  # 4 tokens
    short = best_span([w], max_answer_length=3)
    assert (short.start, short.end, short.score) == (3, 4, 14)  # 3..6 is too long now
    assert best_span([w], max_answer_length=4).end == 6


def test_start_must_have_max_context_in_its_window():
    logits_s, logits_e = [0, 0, 0, 0, 0, 0, 9, 0], [0, 0, 0, 0, 0, 0, 9, 0]
    w = window(logits_s, logits_e, max_context=(0, 0, 0, 1, 1, 1, 0, 0))  # token 6 is better seen elsewhere
    span = best_span([w])
    assert span.start != 6
    # the end token needs no max context (BERT checks the start only)
    w = window([0, 0, 0, 0, 0, 9, 0, 0], logits_e, max_context=(0, 0, 0, 1, 1, 1, 0, 0))
    assert (best_span([w]).start, best_span([w]).end) == (5, 6)


def test_best_window_wins_and_ties_keep_the_earlier_window():
    a = window([0, 0, 0, 2, 0, 0, 0, 0], [0, 0, 0, 2, 0, 0, 0, 0])
    b = window([0, 0, 0, 0, 0, 3, 0, 0], [0, 0, 0, 0, 0, 3, 0, 0])
    assert best_span([a, b]).window == 1 and best_span([a, b]).text(CONTEXT, [a, b]) == "won"
    assert best_span([a, a]).window == 0
    none = window([0] * 8, [0] * 8, max_context=(0,) * 8)
    assert best_span([none]) is None
    answers = predict_answers({0: [none], 1: [a, b]}, [CONTEXT, CONTEXT], ["q0", "q1"])
    assert answers == {"q0": "", "q1": "won"}
    with pytest.raises(ValueError, match="q2"):
        predict_answers({0: [a], 1: [b]}, [CONTEXT, CONTEXT, CONTEXT], ["q0", "q1", "q2"])


def reference(windows, n_best, max_len):
    """BERT's write_predictions, literally: loops over the n-best start and end indexes of each window."""
    prelim = []
    for k, w in enumerate(windows):
        starts = sorted(range(len(w.start_logits)), key=lambda i: -w.start_logits[i])[:n_best]
        ends = sorted(range(len(w.end_logits)), key=lambda i: -w.end_logits[i])[:n_best]
        for s, e in itertools.product(starts, ends):
            if w.offset_start[s] < 0 or w.offset_start[e] < 0 or not w.max_context[s] or e < s or e - s + 1 > max_len:
                continue
            prelim.append((float(w.start_logits[s]) + float(w.end_logits[e]), k, s, e))
    prelim.sort(key=lambda x: -x[0])  # stable, as BERT's sorted(..., reverse=True) on the score
    return prelim[0] if prelim else None


@pytest.mark.parametrize("seed", range(20))
def test_vectorised_decoder_equals_the_reference_loop(seed):
    rng = np.random.default_rng(seed)
    windows = []
    for _ in range(rng.integers(1, 4)):
        n = int(rng.integers(12, 60))
        q = int(rng.integers(3, 8))
        offs = np.where(np.arange(n) < q, -1, np.arange(n) * 3)
        offs[-1] = -1
        mc = (rng.random(n) < 0.7).astype(np.int8)
        # few distinct values: many ties exercise the ordering
        windows.append(
            Window(
                rng.integers(-5, 5, n).astype(np.float32), rng.integers(-5, 5, n).astype(np.float32), offs, offs + 2, mc
            )
        )
    for n_best, max_len in ((20, 30), (5, 3), (3, 1)):
        got, want = best_span(windows, n_best=n_best, max_answer_length=max_len), reference(windows, n_best, max_len)
        if want is None:
            assert got is None
        else:
            assert (got.score, got.window, got.start, got.end) == want
