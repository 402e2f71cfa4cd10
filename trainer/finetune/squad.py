"""SQuAD span decoding: the best answer of each question across all windows of its context.

BERT's ``write_predictions``: in each window take the ``n_best`` highest start logits and the ``n_best``
highest end logits; a pair (start, end) is a candidate when both tokens are context tokens, the window is
the start token's maximal-context window, end >= start and the span has at most ``max_answer_length``
tokens. The candidate with the highest start + end logit over all windows wins (ties: the earlier window,
then the better-ranked start, then end, as BERT's stable sort). The answer text is cut from the context
with the tokens' character offsets: ``context[offset_start[start]:offset_end[end]]``; a question with no
candidate gets the empty answer (which the official metric scores 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertstream.schemas.tasks import NO_OFFSET


@dataclass(frozen=True, slots=True)
class Window:
    """One window's model outputs and token metadata (all of length T, the window's real tokens)."""

    start_logits: np.ndarray  # [T] float
    end_logits: np.ndarray  # [T] float
    offset_start: np.ndarray  # [T] int, NO_OFFSET on question and special tokens
    offset_end: np.ndarray  # [T] int
    max_context: np.ndarray  # [T] int8

    def __post_init__(self) -> None:
        n = len(self.start_logits)
        for name in ("end_logits", "offset_start", "offset_end", "max_context"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"window: {name} has {len(getattr(self, name))} entries, start_logits {n}")


@dataclass(frozen=True, slots=True)
class Span:
    score: float
    window: int  # index into the windows given to best_span
    start: int  # token index in that window
    end: int  # inclusive

    def text(self, context: str, windows: Sequence[Window]) -> str:
        w = windows[self.window]
        return context[int(w.offset_start[self.start]) : int(w.offset_end[self.end])]


def _top(logits: np.ndarray, n: int) -> np.ndarray:
    # highest first; equal logits keep index order (BERT sorts (index, logit) pairs stably)
    return np.argsort(-logits, kind="stable")[:n]


def best_span(windows: Sequence[Window], *, n_best: int = 20, max_answer_length: int = 30) -> Span | None:
    best: Span | None = None
    for k, w in enumerate(windows):
        starts, ends = _top(np.asarray(w.start_logits), n_best), _top(np.asarray(w.end_logits), n_best)
        in_context = np.asarray(w.offset_start) != NO_OFFSET
        s, e = starts[:, None], ends[None, :]  # [n, 1], [1, n]
        valid = (
            in_context[s]
            & in_context[e]
            & (np.asarray(w.max_context)[s] == 1)
            & (e >= s)
            & (e - s + 1 <= max_answer_length)
        )  # [n, n]
        if not valid.any():
            continue
        scores = np.where(valid, w.start_logits[s].astype(np.float64) + w.end_logits[e], -np.inf)
        i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)  # first maximum in (start, end) rank order
        if best is None or scores[i, j] > best.score:
            best = Span(float(scores[i, j]), k, int(starts[i]), int(ends[j]))
    return best


def predict_answers(
    windows_by_example: dict[int, list[Window]],
    contexts: Sequence[str],
    ids: Sequence[str],
    *,
    n_best: int = 20,
    max_answer_length: int = 30,
) -> dict[str, str]:
    """``{question id: answer text}`` for every example (in example order); windows in window order."""
    out: dict[str, str] = {}
    for index, (context, qid) in enumerate(zip(contexts, ids)):
        windows = windows_by_example.get(index)
        if not windows:
            raise ValueError(f"question {qid} (example {index}) has no window in the evaluation data")
        span = best_span(windows, n_best=n_best, max_answer_length=max_answer_length)
        out[qid] = span.text(context, windows) if span is not None else ""
    return out
