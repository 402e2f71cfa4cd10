"""Stage 3, Tokenize: sentences -> WordPiece ids, with nanotoken where it gives `tokenizers`' ids, else `tokenizers`
(:mod:`bertstream.pipelines.tokenizer.wordpiece_backend` decides, once per run).

The tokenizer is built exactly as ``transformers.BertTokenizerFast`` builds it (BertNormalizer with
clean_text, CJK spacing, accent stripping tied to lowercasing; BertPreTokenizer; WordPiece with ``##``
and 100 characters per word), so ids are identical to Hugging Face's for the same vocab and casing.

Speed: a document is encoded in ONE call, its sentences joined by ``[SEP]``; the ids are then cut at the
``[SEP]`` ids. BERT pre-tokenization splits on whitespace, and sentence boundaries lie on whitespace, so
this gives the same ids as encoding each sentence alone, at paragraph speed. Literal special-token strings
in the input (``"[SEP]"`` typed in text) would be ambiguous and are removed first (counted).

With a word segmenter (``--word-segmenter``, whole-word masking of Chinese), each text is also cut into words
and tokens that continue a word are marked in their ids (:mod:`bertstream.pipelines.pretraining.chinese_words`); the encoding then
keeps offsets, which maps a token to its first character: only `tokenizers` gives offsets, so it encodes then.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows
from tokenizers import Tokenizer

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import source_stats as SS
from bertstream.pipelines.pretraining import chinese_words as ws
from bertstream.pipelines.pretraining.shipped import Shipped, resolve
from bertstream.pipelines.tokenizer import wordpiece_backend as WB
from bertstream.pipelines.tokenizer.load import TokenizerSpec, set_tokenizer_threads
from bertstream.schemas import id_types
from bertstream.schemas.vocab import SEP, UNK
from bertstream.schemas.wordpiece import MAX_WORD_CHARS


@dataclass(slots=True)
class TokenizedBatch:
    """Tokenized documents of one read batch.

    ``doc_ids[i]``'s sentences are ``sentence_lengths[sent_start[i]:sent_start[i+1]]`` and its tokens
    ``ids[tok_start[i]:tok_start[i+1]]``, sentences back to back.
    """

    doc_ids: list[str]
    ids: np.ndarray  # [tokens] uint16 | int32
    sentence_lengths: np.ndarray  # [sentences] int32
    doc_sentences: np.ndarray  # [docs] int32: sentences per document
    counters: Counter = field(default_factory=Counter)
    unk_words: Counter = field(default_factory=Counter)  # the words that became [UNK] (for the report)


class DocumentTokenizer:
    """Pure tokenization logic: a tokenizer plus the [SEP]-join trick. Used by the DoFn and by tests.

    ``backend`` (``wordpiece_backend.FAST`` or ``HF``) is the run's choice; None chooses here (``choose_backend``).
    ``threads > 1`` lets nanotoken spread a call over its thread pool (`tokenizers` follows its environment).
    ``sources``: the run's inputs as the report names them (``source_stats.source_table``).
    """

    def __init__(
        self,
        spec: TokenizerSpec,
        word_segmenter: str = "",
        backend: str | None = None,
        threads: int = 1,
        sources: SS.SourceTable = (),
        max_sentence_chars: int | None = None,
    ) -> None:
        self.sources = sources
        self.max_sentence_chars = max_sentence_chars  # longer sentences are cut first (sentence_char_limit)
        self.tokenizer = Tokenizer.from_str(spec.json)  # also the unknown-word reader's normalizer and pre-tokenizer
        self.vocab_size = len(spec.vocab)
        self.segment = ws.load_segmenter(word_segmenter) if word_segmenter else None
        if backend is None:
            backend = WB.choose_backend(spec.json, offsets=self.segment is not None, source=spec.source).name
        self.encoder = WB.WordPieceEncoder(spec.json, backend, threads, hf=self.tokenizer)
        self.sep_id = spec.vocab.id(SEP)
        self.unk_id = spec.vocab.id(UNK)
        self.unk_reader = SS.UnkWordReader(self.tokenizer, spec.vocab.tokens, self.unk_id)
        self.dtype = id_types.numpy_dtype(spec.vocab.id_type)
        added = sorted((t.content for t in self.tokenizer.get_added_tokens_decoder().values()), key=len, reverse=True)
        self._literal = re.compile("|".join(re.escape(t) for t in added))

    @property
    def backend(self) -> WB.Backend:
        """What encodes (the word-segmenter path: `tokenizers` always, for its offsets)."""
        return WB.backend(WB.HF) if self.segment is not None else self.encoder.backend

    # Long documents (books) are encoded in pieces of about this many characters, so that the tokenizer's
    # threads share them out; pieces end on sentence boundaries, so the ids do not change.
    PIECE_CHARS = 64 << 10

    # Characters encoded per call: the tokenizer's Encoding objects take ~100 bytes per token, so a whole
    # 2 MB read batch at once would hold ~50 MB of them; a quarter of it keeps both threads busy as well.
    ENCODE_CHARS = 512 << 10

    def __call__(self, docs: list[tuple[str, list[str]]], counters: Counter) -> TokenizedBatch:
        """``docs`` are ``(doc_id, sentences)``; documents without tokens are dropped and counted."""
        if self.max_sentence_chars is not None:
            docs = [(doc_id, cut_long_sentences(s, self.max_sentence_chars, counters)) for doc_id, s in docs]
        chunks, start, size = [], 0, 0
        for i, (_, sentences) in enumerate(docs):
            size += sum(len(s) + 7 for s in sentences)
            if size >= self.ENCODE_CHARS:
                chunks.append(docs[start : i + 1])
                start, size = i + 1, 0
        if start < len(docs) or not chunks:
            chunks.append(docs[start:])
        if len(chunks) == 1:
            return self._tokenize(docs, counters)
        parts = [self._tokenize(c, counters) for c in chunks]
        return TokenizedBatch(
            doc_ids=[d for p in parts for d in p.doc_ids],
            ids=np.concatenate([p.ids for p in parts]),
            sentence_lengths=np.concatenate([p.sentence_lengths for p in parts]),
            doc_sentences=np.concatenate([p.doc_sentences for p in parts]),
            counters=counters,
            unk_words=sum((p.unk_words for p in parts), Counter()),
        )

    def _tokenize(self, docs: list[tuple[str, list[str]]], counters: Counter) -> TokenizedBatch:
        texts: list[str] = []
        pieces: list[int] = []  # texts per document
        for _, sentences in docs:
            if any("[" in s for s in sentences):
                cleaned = []
                for s in sentences:
                    s, n = self._literal.subn(" ", s)
                    if n:
                        counters[C.SPECIAL_LITERALS] += n
                    cleaned.append(s)
                sentences = cleaned
            before = len(texts)
            start, size = 0, 0
            for i, s in enumerate(sentences):
                size += len(s) + 7
                if size >= self.PIECE_CHARS:
                    texts.append(" [SEP] ".join(sentences[start : i + 1]) + " [SEP]")
                    start, size = i + 1, 0
            if start < len(sentences):
                texts.append(" [SEP] ".join(sentences[start:]) + " [SEP]")
            pieces.append(len(texts) - before)
        if self.segment is None:
            flat, starts_at = self.encoder.encode(texts)
            marks = None
            if self.encoder.fell_back:
                counters[C.TOKENIZER_FALLBACK] += len(docs)
        else:  # offsets are needed: `tokenizers`' plain encode_batch
            encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False) if texts else []
            flat, starts_at = WB.ragged([e.ids for e in encodings])
            segment = self.segment
            marks = [
                ws.continuation_flags(
                    np.fromiter((s for s, _ in e.offsets), dtype=np.int64, count=len(e.offsets)),
                    ws.word_start_chars(text, segment),
                )
                for e, text in zip(encodings, texts)
            ]
        keep_docs, all_ids, all_lens, n_sents = [], [], [], []
        unk_words: Counter = Counter()
        at = 0
        for (doc_id, sentences), n_pieces in zip(docs, pieces):
            ids = flat[starts_at[at] : starts_at[at + n_pieces]]  # a document's pieces are consecutive texts
            at += n_pieces
            if not sentences:
                counters[C.drop(C.EMPTY)] += 1
                continue
            seps = np.flatnonzero(ids == self.sep_id)
            # One [SEP] per sentence; an empty sentence shows as two adjacent [SEP]s.
            starts = np.concatenate(([0], seps[:-1] + 1))
            lengths = (seps - starts).astype(np.int32)
            unk_at = np.flatnonzero(ids == self.unk_id)
            if len(unk_at) and len(seps) == len(sentences):
                for j in np.unique(np.searchsorted(seps, unk_at)):
                    s = sentences[j]
                    s = self._literal.sub(" ", s) if "[" in s else s
                    unk_words.update(self.unk_reader.words(s, ids[starts[j] : seps[j]]))
            elif len(unk_at):
                unk_words[SS.UnkWordReader.UNRECOVERED] += len(unk_at)  # counted, if not spelled out
            nonempty = lengths > 0
            if not nonempty.all():
                counters[C.EMPTY_SENTENCES] += int((~nonempty).sum())
                lengths = lengths[nonempty]
            if not len(lengths):
                counters[C.drop(C.NO_TOKENS)] += 1
                continue
            if len(lengths) == 1:
                counters[C.SINGLE_SENTENCE_DOCS] += 1
            if marks is not None:  # last: everything above reads the real ids
                continues = marks[at - n_pieces] if n_pieces == 1 else np.concatenate(marks[at - n_pieces : at])
                continues[seps] = False
                ids = ws.mark(ids, continues, self.vocab_size)
            tokens = np.delete(ids, seps).astype(self.dtype)
            keep_docs.append(doc_id)
            all_ids.append(tokens)
            all_lens.append(lengths)
            n_sents.append(len(lengths))
            counters[C.DOCUMENTS_USED] += 1
            counters[C.SENTENCES] += len(lengths)
            counters[C.TOKENS] += len(tokens)
            SS.count_document(counters, doc_id, len(tokens), len(unk_at), self.sources)
        return TokenizedBatch(
            doc_ids=keep_docs,
            ids=np.concatenate(all_ids) if all_ids else np.zeros(0, self.dtype),
            sentence_lengths=np.concatenate(all_lens) if all_lens else np.zeros(0, np.int32),
            doc_sentences=np.asarray(n_sents, dtype=np.int32),
            counters=counters,
            unk_words=unk_words,
        )


class _TokenizeFn(beam.DoFn):
    """Encodes a batch in a background thread while the bundle thread reads and segments the next one.

    Both backends release the GIL while they encode, so reading and sentence segmentation (Python, one thread)
    overlap with encoding instead of waiting for it. Outputs keep their order, one batch behind; the last
    one leaves in ``finish_bundle``.
    """

    def __init__(
        self,
        spec: TokenizerSpec | Shipped[TokenizerSpec],
        threads: int,
        word_segmenter: str = "",
        backend: str | None = None,
        max_num_tokens: int | None = None,
        sources: SS.SourceTable = (),
    ) -> None:
        self.spec = spec
        self.threads = threads
        self.word_segmenter = word_segmenter
        self.backend = backend
        self.max_num_tokens = max_num_tokens
        self.sources = sources
        self.tokenize: DocumentTokenizer | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    def setup(self) -> None:
        set_tokenizer_threads(self.threads)
        limit = sentence_char_limit(self.max_num_tokens) if self.max_num_tokens is not None else None
        self.tokenize = DocumentTokenizer(
            resolve(self.spec), self.word_segmenter, self.backend, self.threads, self.sources, limit
        )
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="bertstream-tokenize")

    def start_bundle(self) -> None:
        self._pending = None

    def _encode(self, batch) -> tuple[TokenizedBatch, Counter]:
        # ``batch`` is a segment.SentenceBatch: ([(doc_id, sentences)], counters)
        docs, counters = batch
        assert self.tokenize is not None, "setup() runs before process()"
        before = Counter(counters)
        out = self.tokenize(docs, counters)
        if self.max_num_tokens is not None:
            count_long_sentences(out.counters, out.sentence_lengths, self.max_num_tokens)
        return out, out.counters - before

    def _collect(self) -> TokenizedBatch:
        assert self._pending is not None
        out, delta = self._pending.result()
        self._pending = None
        C.report(SS.without_sources(delta))  # Beam metrics belong to the bundle thread
        return out

    def process(self, batch) -> Iterator[TokenizedBatch]:
        assert self._executor is not None, "setup() runs before process()"
        future = self._executor.submit(self._encode, batch)
        if self._pending is not None:
            yield self._collect()
        self._pending = future

    def finish_bundle(self) -> Iterator:
        if self._pending is not None:
            yield GlobalWindows.windowed_value(self._collect())

    def teardown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def sentence_char_limit(max_num_tokens: int) -> int:
    """The characters of a sentence that are tokenized: a token takes at least one character of a word of at
    most 100 (a longer word is one [UNK]), so a sentence of more characters than this holds more tokens than an
    instance takes (``max_num_tokens``) unless it is mostly whitespace, and instance creation truncates it.
    Cut before tokenizing, it is bounded in memory too: one unpunctuated 5M-character CJK record, one
    "sentence", took 3.1 GB to tokenize (10M: the tokenizer aborted the process). Generous on purpose: a
    sentence below it is tokenized whole, as before."""
    return max(MAX_WORD_CHARS * (max_num_tokens + 1), 1 << 16)


def cut_long_sentences(sentences: list[str], limit: int, counters: Counter) -> list[str]:
    """``sentences`` with each one past ``limit`` characters cut to its first ``limit`` (counted: sentences and
    characters cut)."""
    if all(len(s) <= limit for s in sentences):
        return sentences
    out = []
    for s in sentences:
        if len(s) > limit:
            counters[C.SENTENCES_CUT] += 1
            counters[C.CHARS_CUT] += len(s) - limit
            s = s[:limit]
        out.append(s)
    return out


def count_long_sentences(counters: Counter, sentence_lengths: np.ndarray, max_num_tokens: int) -> None:
    """Count the sentences longer than an instance holds, and their tokens past it: instance creation truncates
    them (a 200 MB line with no sentence end became one instance, the rest dropped without a word). The tokens
    are a lower bound of what truncation drops: a pair is cut to fit, however long its other side."""
    lengths = np.asarray(sentence_lengths, np.int64)
    long = lengths > max_num_tokens
    if long.any():
        counters[C.LONG_SENTENCES] += int(long.sum())
        counters[C.TOKENS_PAST_MAX_LENGTH] += int((lengths[long] - max_num_tokens).sum())


class Tokenize(beam.PTransform):
    """``PCollection[SentenceBatch]`` -> ``PCollection[TokenizedBatch]``; ``backend``: the launcher's
    ``choose_backend``, so that every worker encodes with the backend the manifest names."""

    def __init__(
        self,
        spec: TokenizerSpec | Shipped[TokenizerSpec],
        threads: int = 1,
        word_segmenter: str = "",
        backend: str | None = None,
        max_num_tokens: int | None = None,
        sources: SS.SourceTable = (),
    ) -> None:
        super().__init__()
        self.sources = sources
        self.spec = spec
        self.threads = threads
        self.word_segmenter = word_segmenter
        self.backend = backend
        self.max_num_tokens = max_num_tokens  # given: sentences past it are counted (instances truncate them)

    def expand(self, batches):
        fn = _TokenizeFn(self.spec, self.threads, self.word_segmenter, self.backend, self.max_num_tokens, self.sources)
        return batches | "Encode" >> beam.ParDo(fn)
