"""Word boundaries for whole-word masking of Chinese, from a word segmenter over the original text.

BERT's basic tokenizer splits Chinese into single characters, so the ``##`` pieces that give English words
to whole-word masking never occur in Chinese text. Chinese-BERT-wwm takes words from a segmenter instead
and masks a word's characters together; so do we: ``--word-segmenter`` (``rjieba``, or ``jieba``) cuts
the text into words, and a token continues a word when its first character is not the first character of
a segmenter word (or when it is a ``##`` piece: a WordPiece word is never split).

How the flags reach the masker: a continuing token's id is *marked* by adding the vocabulary size
(:func:`mark`), in the Tokenize stage where the text is at hand; Mask removes the mark again
(:func:`unmark`) and passes the flags as the per-token word-start array of the one masking code path. The
flag so travels with its token through grouping, spill files and instance creation without a change to any
of them or to their wire formats, and shards never see a mark: they stay schema v1, byte for byte what
they would be with the same masks. Marked ids must fit the id type (:func:`check_vocab_size`).

Speed (``benchmarks/segmenter_eval.py --words``, the shared Chinese text, 4 MB): rjieba (Rust) segments 9.6x faster
than jieba (Python), with the same dictionary; both cut 89% of the lines into the same words (they differ in
details of the HMM for unknown words).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

import numpy as np

from bertstream.schemas import id_types

SEGMENTERS = ("rjieba", "jieba")
INSTALL_HINT = "pip install 'bertstream[chinese]'"

# A segmenter maps text to the [start, end) character spans of its words, in order, covering the text.
WordSpans = Callable[[str], list[tuple[int, int]]]


class SegmenterMissing(ImportError):
    """The package behind ``--word-segmenter`` is not installed."""


def load_segmenter(name: str) -> WordSpans:
    """The word spans function of segmenter ``name``; :class:`SegmenterMissing` names the package if absent."""
    if name not in SEGMENTERS:
        raise ValueError(f"unknown word segmenter {name!r} (one of {', '.join(SEGMENTERS)})")
    try:
        module = importlib.import_module(name)
    except ImportError:
        raise SegmenterMissing(f"needs the {name} package, which is not installed ({INSTALL_HINT})") from None
    if name == "jieba":
        module.setLogLevel(logging.WARNING)  # its dictionary load logs to stderr in every worker
        module.initialize()

        def spans(text: str) -> list[tuple[int, int]]:
            return [(s, e) for _, s, e in module.tokenize(text, HMM=True)]

        return spans

    def rspans(text: str) -> list[tuple[int, int]]:
        return [(s, e) for _, s, e in module.tokenize(text, hmm=True)]

    return rspans


def check_word_segmenter(name: str, spec) -> None:
    """Before Beam starts: the segmenter's package is installed and marked ids fit (``spec``: a TokenizerSpec).
    Raises ``UsageError`` naming ``--word-segmenter``: one line, never a worker's traceback."""
    from bertstream.cli.errors import UsageError

    try:
        load_segmenter(name)
        check_vocab_size(len(spec.vocab), spec.vocab.id_type)
    except (SegmenterMissing, ValueError) as e:
        raise UsageError("word-segmenter", f"{name}: {e}") from None


def word_start_chars(text: str, segment: WordSpans) -> np.ndarray:
    """``[len(text) + 1]`` bool: True where a segmenter word starts (and at the end of the text)."""
    from bertstream.pipelines.common.files import (
        InputError,  # one Error line naming the flag, never a worker's IndexError
    )

    starts = np.zeros(len(text) + 1, dtype=bool)
    try:
        spans = list(segment(text))
    except Exception as e:  # noqa: BLE001 - any failure of a third-party segmenter
        raise InputError(f"--word-segmenter failed ({type(e).__name__}: {e}) on the text {text[:40]!r}") from e
    bad = next(((s, e) for s, e in spans if not 0 <= s <= e <= len(text)), None)
    if bad is not None:
        raise InputError(
            f"--word-segmenter returned the span {bad}, outside the text of {len(text)} characters {text[:40]!r}"
        )
    if spans:
        starts[np.fromiter((s for s, _ in spans), dtype=np.int64, count=len(spans))] = True
    starts[len(text)] = True
    return starts


def continuation_flags(token_starts: np.ndarray, word_starts: np.ndarray) -> np.ndarray:
    """``[T]`` bool: token ``t`` (first character at ``token_starts[t]``) continues a segmenter word."""
    return ~word_starts[np.asarray(token_starts, dtype=np.int64)]


def check_vocab_size(vocab_size: int, id_type: str) -> None:
    """Marked ids go up to ``2 * vocab_size - 1``: they must fit the shards' id type (uint16 below 32,769)."""
    if id_type == id_types.UINT16.name and 2 * vocab_size > 1 << 16:
        raise ValueError(
            f"whole-word masking with a word segmenter marks ids above the vocabulary, which needs a vocabulary "
            f"of at most 32,768 tokens with uint16 ids (this one has {vocab_size:,})"
        )


def mark(ids: np.ndarray, continues: np.ndarray, vocab_size: int) -> np.ndarray:
    """``ids`` with each continuing token's id raised by ``vocab_size`` (same dtype; see the module doc)."""
    out = ids.copy()
    out[continues] += out.dtype.type(vocab_size)
    return out


def unmark(ids: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, continues)``: the real ids and the ``[T]`` bool flags that :func:`mark` put in them."""
    continues = ids >= vocab_size
    if not continues.any():
        return ids, continues
    out = ids.copy()
    out[continues] -= out.dtype.type(vocab_size)
    return out, continues
