"""Stage 2 (SQuAD), Featurize: questions -> ``[CLS] question [SEP] context window [SEP]`` rows.

As BERT's ``run_squad.py``: the question is cut to ``max_query_length`` tokens; the context is covered by
windows of ``max_seq_length - len(question) - 3`` tokens whose starts are ``doc_stride`` tokens apart; a
window's answer positions are the answer's first and last tokens when both lie inside it, else 0 (the
``[CLS]`` position, also used for impossible questions). Token character offsets into the context are kept
(-1 for question and special tokens) so a predicted span maps back to context text, and ``max_context``
marks, per token, the window where it has the most context on both sides (BERT's ``_check_is_max_context``).

The answer's token span comes from the character span the reader aligned (``parse.align_answer``) and the
tokens' offsets. An answer that starts or ends inside a token (``"Bronco"`` in ``"Broncos"``) cannot be
represented exactly; it is counted under ``answers_not_on_token_boundary`` with the question ids.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.tasks.features import Layout, TaskTokenizer, check_windows, ragged, table
from bertstream.pipelines.tasks.read import RecordBatch
from bertstream.pipelines.tasks.squad.parse import UNIT, QAExample
from bertstream.pipelines.tokenizer.load import TokenizerSpec
from bertstream.schemas import id_types
from bertstream.schemas import tasks as T

_WS = re.compile(r"\s+")


def plan_spans(n_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """Context token ranges ``[start, end)`` of the windows (BERT's doc spans); one empty window for no tokens."""
    spans, start = [], 0
    while True:
        length = min(n_tokens - start, max_tokens)
        spans.append((start, start + length))
        if start + length >= n_tokens:
            return spans
        start += min(length, stride)


def max_context(spans: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """Per window, a ``[end - start]`` int8 mask of the tokens for which it is the maximal-context window:
    score = min(tokens left, tokens right) + 0.01 * window length, ties to the earlier window."""
    if len(spans) == 1:
        s, e = spans[0]
        return [np.ones(e - s, dtype=np.int8)]
    n = max(e for _, e in spans)
    best = np.full(n, -1.0)
    owner = np.full(n, -1, dtype=np.int64)
    for k, (s, e) in enumerate(spans):
        pos = np.arange(s, e)
        score = np.minimum(pos - s, e - 1 - pos) + 0.01 * (e - s)
        better = score > best[s:e]
        best[s:e][better] = score[better]
        owner[s:e][better] = k
    return [(owner[s:e] == k).astype(np.int8) for k, (s, e) in enumerate(spans)]


def answer_tokens(offsets: np.ndarray, span: tuple[int, int]) -> tuple[int, int] | None:
    """First and last context token overlapping the character span, None when no token does."""
    start_char, end_char = span
    hit = np.flatnonzero((offsets[:, 1] > start_char) & (offsets[:, 0] < end_char))
    if not len(hit):
        return None
    return int(hit[0]), int(hit[-1])


def normalize_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


class ExampleFeaturizer:
    """Pure featurization of a batch of ``QAExample`` (used by the Featurize stage and by tests)."""

    def __init__(self, spec: TokenizerSpec, *, max_seq_length: int, doc_stride: int, max_query_length: int) -> None:
        self.tok = TaskTokenizer(spec)
        self.id_type = spec.vocab.id_type
        self.max_seq_length = max_seq_length
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length

    def __call__(self, batch: RecordBatch, labels: Sequence[str], layout: Layout, tally: Tally) -> pa.Table:
        examples: list[QAExample] = batch.records
        questions = self.tok.ids([self.tok.clean(e.question, tally) for e in examples])
        unique = list(dict.fromkeys(e.context for e in examples))  # contexts repeat for every question
        encoded = dict(zip(unique, self.tok.ids_and_offsets([self.tok.clean(c, tally) for c in unique])))
        names = (
            T.ROW_ID,
            T.EXAMPLE_INDEX,
            T.EXAMPLE_ID,
            T.WINDOW,
            T.INPUT_IDS,
            T.SEGMENT_A_LENGTH,
            T.OFFSET_START,
            T.OFFSET_END,
            T.MAX_CONTEXT,
            T.START_POSITION,
            T.END_POSITION,
            T.IS_IMPOSSIBLE,
        )
        cols: dict[str, list] = {k: [] for k in names}
        globals_: list[int] = []
        for i, (ex, q) in enumerate(zip(examples, questions)):
            g = layout.global_index(batch, i)
            if len(q) > self.max_query_length:
                tally.add("questions_truncated")
                tally.add("tokens_removed_by_truncation", len(q) - self.max_query_length)
                q = q[: self.max_query_length]
            ctx_ids, offsets = encoded[ex.context]
            tokens = None if ex.span is None else answer_tokens(offsets, ex.span)
            if ex.span is not None and tokens is None:
                tally.note("answers_without_tokens", batch.file_index, ex.ordinal, ex.qid)
            if tokens is not None and ex.span is not None:
                text = ex.context[offsets[tokens[0], 0] : offsets[tokens[1], 1]]
                if normalize_ws(text) != normalize_ws(ex.context[ex.span[0] : ex.span[1]]):
                    tally.note("answers_not_on_token_boundary", batch.file_index, ex.ordinal, ex.qid)
            seg_a = len(q) + 2
            spans = plan_spans(len(ctx_ids), self.max_seq_length - seg_a - 1, self.doc_stride)
            check_windows(
                len(spans), f"{batch.path}: question {ex.qid}'s context", "raise --doc-stride (or --max-seq-length)"
            )
            if len(spans) > 1:
                tally.add("examples_split_into_windows")
            head = np.concatenate(([self.tok.cls_id], q, [self.tok.sep_id]))
            no_offset = np.full(seg_a, T.NO_OFFSET, dtype=np.int32)
            for w, ((s, e), best) in enumerate(zip(spans, max_context(spans))):
                start = end = 0
                if tokens is not None and s <= tokens[0] and tokens[1] < e:
                    start, end = tokens[0] - s + seg_a, tokens[1] - s + seg_a
                elif tokens is not None:
                    tally.add("windows_without_the_answer")
                cols[T.ROW_ID].append(T.row_id(batch.file_index, ex.ordinal, w))
                cols[T.EXAMPLE_INDEX].append(g)
                cols[T.EXAMPLE_ID].append(ex.qid)
                cols[T.WINDOW].append(w)
                cols[T.INPUT_IDS].append(np.concatenate((head, ctx_ids[s:e], [self.tok.sep_id])))
                cols[T.SEGMENT_A_LENGTH].append(seg_a)
                cols[T.OFFSET_START].append(np.concatenate((no_offset, offsets[s:e, 0], [T.NO_OFFSET])))
                cols[T.OFFSET_END].append(np.concatenate((no_offset, offsets[s:e, 1], [T.NO_OFFSET])))
                cols[T.MAX_CONTEXT].append(np.concatenate((np.zeros(seg_a, np.int8), best, [0])))
                cols[T.START_POSITION].append(start)
                cols[T.END_POSITION].append(end)
                cols[T.IS_IMPOSSIBLE].append(ex.is_impossible)
                globals_.append(g)
                tally.add("tokens", seg_a + e - s + 1)
            tally.add(f"{UNIT}_used")
            tally.add("windows", len(spans))
        ids_type = id_types.arrow_type(self.id_type)
        return table(
            T.SPANS,
            self.id_type,
            {
                T.ROW_ID: np.asarray(cols[T.ROW_ID], dtype=np.uint64),
                T.EXAMPLE_INDEX: np.asarray(cols[T.EXAMPLE_INDEX], dtype=np.int32),
                T.EXAMPLE_ID: pa.array(cols[T.EXAMPLE_ID], type=pa.string()),
                T.WINDOW: np.asarray(cols[T.WINDOW], dtype=T.WINDOW_DTYPE),
                T.INPUT_IDS: ragged(cols[T.INPUT_IDS], ids_type),
                T.SEGMENT_A_LENGTH: np.asarray(cols[T.SEGMENT_A_LENGTH], dtype=np.int16),
                T.OFFSET_START: ragged(cols[T.OFFSET_START], pa.int32()),
                T.OFFSET_END: ragged(cols[T.OFFSET_END], pa.int32()),
                T.MAX_CONTEXT: ragged(cols[T.MAX_CONTEXT], pa.int8()),
                T.START_POSITION: np.asarray(cols[T.START_POSITION], dtype=np.int32),
                T.END_POSITION: np.asarray(cols[T.END_POSITION], dtype=np.int32),
                T.IS_IMPOSSIBLE: pa.array(cols[T.IS_IMPOSSIBLE], type=pa.bool_()),
            },
            np.asarray(globals_, dtype=np.int64),
        )
