"""Stage 2, Segment: paragraphs -> sentences (``sentences``-format input is already segmented), a batch of
documents at once: the compiled scan (:mod:`bertstream.pipelines.pretraining.kernels.segment`) finds every
candidate and decides the common ones; Python decides the rest with the rules of
:mod:`bertstream.pipelines.pretraining.segmenter`, in order, and the sentences are cut from the batch's text in
one go. The result is exactly ``split_sentences`` of each paragraph (the reference, kept for single paragraphs
and tested against this on random text and all the shared text).

The scan reads character properties from a table made with ``str``'s own methods and the segmenter's sets:
the Basic Multilingual Plane once per process (~20 ms), code points above it as batches bring them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import apache_beam as beam
import numpy as np

from bertstream.pipelines.inputs.documents import DocumentBatch
from bertstream.pipelines.pretraining import segmenter as S

# (documents as (doc_id, sentences), counters): the tokenizer's input.
SentenceBatch = tuple[list[tuple[str, list[str]]], Counter]

# (character properties, abbreviation spellings' hashes, the word lists' hashes), made once
_TABLE: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
_ASTRAL_DONE: set[int] = set()  # code points above U+FFFF whose properties are in the table


def _properties(chars: list[str]) -> np.ndarray:
    """The ``str``-method bits of each character (one C-level pass per property: ~20 ms for the whole BMP, where
    a Python loop over the characters took 0.4 s)."""
    from bertstream.pipelines.pretraining.kernels import segment as K

    out = np.zeros(len(chars), np.uint16)
    for method, bit in (
        (str.isspace, K.SPACE),
        (str.isupper, K.UPPER),
        (str.islower, K.LOWER),
        (str.isalpha, K.ALPHA),
        (str.isdigit, K.DIGIT),
    ):
        out |= np.fromiter(map(method, chars), bool, len(chars)).astype(np.uint16) * bit
    return out


def _hashes(words) -> np.ndarray:
    """The sorted hashes of ``words``: ``kernels.segment.token_hash`` (FNV-1a over code points, 64-bit) in Python."""
    out = set()
    for w in words:
        h = 0xCBF29CE484222325
        for c in w:
            h = ((h ^ ord(c)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        out.add(h)
    return np.array(sorted(out), np.uint64)


def _tables(cp: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per code point, the property bits the scan tests (``str`` methods and the segmenter's sets, so they
    agree with the reference by construction), filled for the BMP and for the code points above it in
    ``cp``; the hashes of every abbreviation spelling, and of the word lists' words (lowercase; states as
    spelled)."""
    from bertstream.pipelines.pretraining.kernels import segment as K

    if not _TABLE:
        props = np.zeros(0x110000, np.uint16)
        props[:0x10000] = _properties([chr(i) for i in range(0x10000)])
        for chars_of, bit in (
            (S._TERMINATORS, K.TERM),
            (S._CLOSERS, K.CLOSER),
            (S._CJK_ENDS, K.CJK_END),
            (S._CJK_TERMINATORS, K.CJK_TERM),
            (S._CJK_CONTINUES, K.CJK_CONT),
            (S._TOKEN_PREFIX, K.PREFIX),
        ):
            for c in chars_of:
                props[ord(c)] |= bit
        lists = S._TITLES | S._NEVER_FINAL | S._BEFORE_NUMBER | S._OFTEN_FINAL | S._AMBIGUOUS | S._STATES
        _TABLE.append((props, _hashes(S._KINDS), _hashes(lists)))
    props = _TABLE[0][0]
    if cp is not None and cp.size and int(cp.max()) > 0xFFFF:
        new = [i for i in np.unique(cp[cp > 0xFFFF]).tolist() if i not in _ASTRAL_DONE]
        if new:  # none is a terminator, closer, opener or space: the str-method bits are all they have
            props[new] = _properties([chr(i) for i in new])
            _ASTRAL_DONE.update(new)
    return _TABLE[0]


def split_documents(docs: list[list[str]]) -> list[list[str]]:
    """The sentences of each document's paragraphs: ``[[s for p in d for s in split_sentences(p)] for d in docs]``,
    by the compiled scan or, while numba is not worth starting (:mod:`bertstream.pipelines.pretraining.kernels.switch`),
    by that reference itself: the same sentences."""
    from bertstream.pipelines.pretraining.kernels import switch

    return switch.run(scan_documents, reference_split_documents, docs)


def reference_split_documents(docs: list[list[str]]) -> list[list[str]]:
    """The reference, paragraph by paragraph (``segmenter.split_sentences``): what :func:`scan_documents` is held to."""
    return [[s for p in d for s in S.split_sentences(p)] for d in docs]


def scan_documents(docs: list[list[str]]) -> list[list[str]]:
    """:func:`reference_split_documents` by the compiled scan: one pass over the batch's code points."""
    paragraphs = [p for d in docs for p in d]
    if not paragraphs:
        return [[] for _ in docs]
    text = "".join(paragraphs)
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    from bertstream.pipelines.pretraining.kernels import segment as K

    props, kind_hashes, list_hashes = _tables(cp)
    lengths = np.fromiter(map(len, paragraphs), np.int64, len(paragraphs))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    cand, first, last = K.scan_document(cp, props, starts, ends, kind_hashes, list_hashes)
    cut = cand[6] == K.CUT
    python = np.flatnonzero(cand[6] == K.PYTHON)
    if len(python):
        cut[python] = _decide(paragraphs, starts.tolist(), cand[:, python].T.tolist())
    cuts = np.flatnonzero(cut)
    ws, nxt = cand[3, cuts], cand[4, cuts]
    nonblank = first >= 0
    sent_starts = np.sort(np.concatenate((first[nonblank], nxt)))
    sent_stops = np.sort(np.concatenate((np.where(ws >= 0, ws, nxt), last[nonblank])))
    sentences = [text[a:b] for a, b in zip(sent_starts.tolist(), sent_stops.tolist())]
    per_paragraph = np.bincount(cand[5, cuts], minlength=len(paragraphs)) + nonblank
    # The sentences before each document's first paragraph, then after its last.
    before = np.concatenate(([0], np.cumsum(per_paragraph)))[np.cumsum([0, *map(len, docs)])].tolist()
    out = [sentences[a:b] for a, b in zip(before[:-1], before[1:])]
    return out


def _decide(paragraphs: list[str], starts: list[int], rows: list[list[int]]) -> list[bool]:
    """The reference's decision for each candidate the scan left to Python, in text order: a cut made here
    moves the sentence start that later candidates of its paragraph see."""
    decided = []
    last_paragraph, last_cut = -1, -1
    for at, run_end, closers_end, _, end, pi, _, bracket_open, sure_start in rows:
        p, base = paragraphs[pi], starts[pi]
        sent = last_cut if pi == last_paragraph and last_cut > sure_start else sure_start
        rel = at - base
        cut = S._is_boundary(
            p, rel, p[rel : run_end - base], p[run_end - base : closers_end - base], end - base, sent - base,
            bool(bracket_open),
        )  # fmt: skip
        if cut:
            last_paragraph, last_cut = pi, end
        decided.append(cut)
    return decided


def segment_documents(batch: DocumentBatch) -> SentenceBatch:
    # The whole batch is segmented in one call (one compiled scan), not paragraph by paragraph.
    docs = batch.documents
    split = iter(split_documents([d.paragraphs for d in docs if not d.presegmented]))
    out = [(d.doc_id, d.paragraphs if d.presegmented else next(split)) for d in docs]
    return out, batch.counters


class _SegmentFn(beam.DoFn):
    def process(self, batch: DocumentBatch) -> Iterator[SentenceBatch]:
        yield segment_documents(batch)


class SegmentDocuments(beam.PTransform):
    """``PCollection[DocumentBatch]`` -> ``PCollection[SentenceBatch]``."""

    def expand(self, batches):
        return batches | "Split" >> beam.ParDo(_SegmentFn())
