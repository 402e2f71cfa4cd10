"""NER: window predictions -> one tag per word per sentence, and the CoNLL-style predictions file.

Each word is predicted once: on its FIRST sub-token (the only token with a label other than -100) in the
window that OWNS it (``owned == 1``; windows overlap, the overlap is split at its middle). The words of a
sentence are its rows' ``word_ids`` there; a sentence whose words are not each found exactly once is an
error, never dropped. Word text for the output comes from the original CoNLL file when it is readable
(rows record their file and start line), else from the word's WordPiece tokens (``##`` joined).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertstream.schemas import tasks as T
from bertstream.trainer.finetune.data import TaskData, TaskDataError


@dataclass(slots=True)
class SentenceTags:
    file_index: int
    line: int  # 1-based line of the sentence's first word
    gold: np.ndarray  # [num_words] label ids
    pred: np.ndarray  # [num_words] label ids
    pieces: list[list[str]]  # per word, its WordPiece tokens (owning window)


def sentence_tags(data: TaskData, logits: Sequence[np.ndarray]) -> list[SentenceTags]:
    """Per sentence (input order), gold and predicted tag ids of every word. ``logits[i]``: [tokens of row i, C]."""
    c = data.columns
    tokens = data.vocab.tokens
    out: list[SentenceTags] = []
    by_key: dict[int, SentenceTags] = {}
    for i in range(len(data)):
        rid = int(c[T.ROW_ID][i])
        key = rid >> T.WINDOW_BITS
        s = by_key.get(key)
        if s is None:
            file_index, line, _ = T.split_row_id(rid)
            n = int(c[T.NUM_WORDS][i])
            s = SentenceTags(
                file_index, line, np.full(n, -1, np.int64), np.full(n, -1, np.int64), [[] for _ in range(n)]
            )
            by_key[key] = s
            out.append(s)
        labels, word_ids, owned, ids = c[T.LABELS][i], c[T.WORD_IDS][i], c[T.OWNED][i], c[T.INPUT_IDS][i]
        if len(logits[i]) != len(labels):
            raise ValueError(f"row {rid}: {len(logits[i])} token predictions for {len(labels)} tokens")
        first = (labels != T.IGNORE_INDEX) & (owned == 1)
        words = word_ids[first]
        if len(words) and (words.min() < 0 or words.max() >= len(s.gold) or (s.gold[words] != -1).any()):
            raise TaskDataError(
                f"{data.root}: sentence at input {s.file_index} line {s.line}: window {rid & 0xFFFF} "
                "predicts a word outside the sentence or one already owned by another window"
            )
        s.gold[words] = labels[first]
        s.pred[words] = np.asarray(logits[i])[first].argmax(-1)
        for t in np.flatnonzero(owned == 1):
            s.pieces[word_ids[t]].append(tokens[ids[t]])
    for s in out:
        if (s.gold == -1).any():
            missing = np.flatnonzero(s.gold == -1).tolist()
            raise TaskDataError(
                f"{data.root}: sentence at input {s.file_index} line {s.line}: word(s) {missing[:10]} "
                "have no labelled first sub-token in their owning window"
            )
    return out


def _piece_word(pieces: list[str]) -> str:
    return "".join(p.removeprefix("##") for p in pieces) or "[UNK]"


def _read_lines(path: str) -> list[str] | None:
    """The file's lines as the pipeline numbers them (CRLF and lone CR end lines too), or None if unreadable."""
    try:
        import fsspec

        with fsspec.open(path, "rb", compression="infer") as f:
            text = f.read().decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - the words are cosmetic: fall back to WordPiece text
        return None
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")


def sentence_words(data: TaskData, sentences: Sequence[SentenceTags]) -> tuple[list[list[str]], str]:
    """Word strings of each sentence and where they came from ("input" or "wordpiece")."""
    inputs = [entry["path"] for entry in data.manifest.inputs]
    files: dict[int, list[str] | None] = {}
    words: list[list[str]] = []
    from_input = True
    for s in sentences:
        if s.file_index not in files:
            files[s.file_index] = _read_lines(inputs[s.file_index]) if s.file_index < len(inputs) else None
        lines = files[s.file_index]
        n = len(s.gold)
        got = None
        if lines is not None:
            fields = [line.split() for line in lines[s.line - 1 : s.line - 1 + n]]
            if len(fields) == n and all(len(f) >= 2 for f in fields):
                got = [f[0] for f in fields]
        if got is None:
            from_input = False
            got = [_piece_word(p) for p in s.pieces]
        words.append(got)
    return words, "input" if from_input else "wordpiece"


def conll_text(words: Sequence[Sequence[str]], sentences: Sequence[SentenceTags], labels: Sequence[str]) -> str:
    """``word gold pred`` per line, a blank line after each sentence (what conlleval reads)."""
    out: list[str] = []
    for ws, s in zip(words, sentences):
        out.extend(f"{w} {labels[g]} {labels[p]}" for w, g, p in zip(ws, s.gold, s.pred))
        out.append("")
    return "\n".join(out) + ("\n" if out else "")
