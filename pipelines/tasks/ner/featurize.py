"""Stage 2 (NER), Featurize: CoNLL sentences -> token rows with per-token tag ids, word ids and ownership.

A word's tag goes on its first sub-token; other sub-tokens and ``[CLS]``/``[SEP]`` carry ``IGNORE_INDEX``.
A word without any token (only invisible characters) becomes ``[UNK]`` so that it keeps its tag and
position (counted). A sentence longer than ``max_seq_length - 2`` tokens is never dropped: it is split into
windows of whole words that overlap by ``window_overlap`` words (:func:`plan_windows`), and each word is
OWNED by exactly one window (:func:`ownership`: the overlap is split at its middle), so predictions merge
back into one tag per word without double counting.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from bertstream.pipelines.common.counters import Tally, drop
from bertstream.pipelines.tasks.features import (
    Layout,
    TaskTokenizer,
    check_windows,
    ragged,
    table,
    unknown_label_error,
)
from bertstream.pipelines.tasks.ner.parse import TAG_NOT_IN_SET, UNIT, Sentence
from bertstream.pipelines.tasks.read import RecordBatch, where
from bertstream.pipelines.tokenizer.load import TokenizerSpec
from bertstream.schemas import id_types
from bertstream.schemas import tasks as T


def plan_windows(word_tokens: Sequence[int], budget: int, overlap: int) -> list[tuple[int, int]]:
    """Word ranges ``[start, end)`` of the windows of a sentence.

    Each window holds as many whole words as fit in ``budget`` tokens (every word's count must be
    ``<= budget``). The next window starts ``overlap`` words before the previous end, later if needed so
    that it still reaches the first word the previous window could not hold: windows always progress.
    """
    n = len(word_tokens)
    if n == 0:
        return [(0, 0)]
    counts = np.asarray(word_tokens, dtype=np.int64)
    if counts.max() > budget:
        raise ValueError(f"a word of {counts.max()} tokens exceeds the window budget {budget}")
    cum = np.concatenate(([0], np.cumsum(counts)))
    windows: list[tuple[int, int]] = []
    start = 0
    while True:
        # The largest end with cum[end] - cum[start] <= budget.
        end = int(np.searchsorted(cum, cum[start] + budget, side="right")) - 1
        windows.append((start, end))
        if end >= n:
            return windows
        nxt = max(start + 1, end - overlap)
        while cum[end + 1] - cum[nxt] > budget:
            nxt += 1
        start = nxt


def ownership(windows: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Owned word ranges: consecutive windows split their overlap at its middle; together they partition
    ``[0, n)``."""
    owned = []
    own_start = windows[0][0]
    for k, (_, end) in enumerate(windows):
        if k + 1 < len(windows):
            next_start = windows[k + 1][0]
            own_end = (next_start + end + 1) // 2  # middle of the overlap [next_start, end)
        else:
            own_end = end
        owned.append((own_start, own_end))
        own_start = own_end
    return owned


class SentenceFeaturizer:
    """Pure featurization of a batch of ``Sentence`` (used by the Featurize stage and by tests)."""

    def __init__(
        self, spec: TokenizerSpec, *, max_seq_length: int, window_overlap: int, training: bool, label_source: str
    ) -> None:
        self.tok = TaskTokenizer(spec)
        self.id_type = spec.vocab.id_type
        self.budget = max_seq_length - 2
        self.overlap = window_overlap
        self.training = training
        self.label_source = label_source

    def __call__(self, batch: RecordBatch, labels: Sequence[str], layout: Layout, tally: Tally) -> pa.Table:
        sentences: list[Sentence] = batch.records
        tag_id = {name: i for i, name in enumerate(labels)}
        encoded = self.tok.word_ids([[self.tok.clean(w, tally) for w in s.words] for s in sentences])
        cols: dict[str, list] = {
            k: [] for k in (T.ROW_ID, T.WINDOW, T.INPUT_IDS, T.LABELS, T.WORD_IDS, T.OWNED, T.NUM_WORDS)
        }
        globals_: list[int] = []
        for i, (sentence, (ids, wids)) in enumerate(zip(sentences, encoded)):
            unknown = next((t for t in sentence.tags if t not in tag_id), None)
            if unknown is not None:
                line = sentence.line + sentence.tags.index(unknown)
                if not self.training:
                    raise unknown_label_error(unknown, labels, where(batch.path, line), self.label_source)
                tally.note(drop(TAG_NOT_IN_SET, UNIT), batch.file_index, line, where(batch.path, line))
                continue
            words = self._word_tokens(ids, wids, len(sentence.words), sentence, batch, tally)
            windows = plan_windows([len(w) for w in words], self.budget, self.overlap)
            if len(windows) > 1:
                tally.add("sentences_split_into_windows")
            check_windows(
                len(windows),
                f"{where(batch.path, sentence.line)}: a sentence of {len(words):,} words",
                "is a blank line missing between sentences? (or raise --max-seq-length)",
            )
            tags = [tag_id[t] for t in sentence.tags]
            for w, ((start, end), (own_start, own_end)) in enumerate(zip(windows, ownership(windows))):
                pieces = words[start:end]
                n_tok = sum(len(p) for p in pieces)
                ids_out = np.empty(n_tok + 2, dtype=np.int64)
                labels_out = np.full(n_tok + 2, T.IGNORE_INDEX, dtype=np.int16)
                word_out = np.full(n_tok + 2, T.NO_OFFSET, dtype=np.int32)
                owned_out = np.zeros(n_tok + 2, dtype=np.int8)
                ids_out[0], ids_out[-1] = self.tok.cls_id, self.tok.sep_id
                pos = 1
                for word, piece in enumerate(pieces, start):
                    ids_out[pos : pos + len(piece)] = piece
                    labels_out[pos] = tags[word]
                    word_out[pos : pos + len(piece)] = word
                    owned_out[pos : pos + len(piece)] = own_start <= word < own_end
                    pos += len(piece)
                cols[T.ROW_ID].append(T.row_id(batch.file_index, sentence.line, w))
                cols[T.WINDOW].append(w)
                cols[T.INPUT_IDS].append(ids_out)
                cols[T.LABELS].append(labels_out)
                cols[T.WORD_IDS].append(word_out)
                cols[T.OWNED].append(owned_out)
                cols[T.NUM_WORDS].append(len(sentence.words))
                globals_.append(layout.global_index(batch, i))
                tally.add("tokens", len(ids_out))
            tally.add(f"{UNIT}_used")
            tally.add("words", len(sentence.words))
            tally.add("windows", len(windows))
        return table(
            T.TOKEN_LABELS,
            self.id_type,
            {
                T.ROW_ID: np.asarray(cols[T.ROW_ID], dtype=np.uint64),
                T.WINDOW: np.asarray(cols[T.WINDOW], dtype=T.WINDOW_DTYPE),
                T.INPUT_IDS: ragged(cols[T.INPUT_IDS], id_types.arrow_type(self.id_type)),
                T.LABELS: ragged(cols[T.LABELS], pa.int16()),
                T.WORD_IDS: ragged(cols[T.WORD_IDS], pa.int32()),
                T.OWNED: ragged(cols[T.OWNED], pa.int8()),
                T.NUM_WORDS: np.asarray(cols[T.NUM_WORDS], dtype=np.int32),
            },
            np.asarray(globals_, dtype=np.int64),
        )

    def _word_tokens(
        self, ids: np.ndarray, wids: np.ndarray, n_words: int, sentence: Sentence, batch: RecordBatch, tally: Tally
    ) -> list[np.ndarray]:
        """Sub-token ids of each word; empty words become ``[UNK]``, over-long words are cut to the budget."""
        bounds = np.searchsorted(wids, np.arange(n_words + 1), side="left")
        words = []
        for w in range(n_words):
            piece = ids[bounds[w] : bounds[w + 1]]
            if not len(piece):
                tally.note(
                    "words_without_tokens_as_unk",
                    batch.file_index,
                    sentence.line + w,
                    where(batch.path, sentence.line + w),
                )
                piece = np.array([self.tok.unk_id], dtype=np.int64)
            elif len(piece) > self.budget:
                tally.note(
                    "words_truncated_to_window",
                    batch.file_index,
                    sentence.line + w,
                    where(batch.path, sentence.line + w),
                )
                piece = piece[: self.budget]
            words.append(piece)
        return words
