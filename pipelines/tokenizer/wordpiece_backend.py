"""Which library turns text into WordPiece ids for the pretraining pipeline, and the one call that does it.

Two backends give the same ids for the tokenizers bertstream builds (``bertstream.schemas.wordpiece``: BertTokenizerFast's):
Hugging Face ``tokenizers`` (the reference; it also trains vocabularies and gives the offsets the task pipelines
and the word segmenter need) and ``nanotoken`` (a Rust WordPiece encoder written to match ``tokenizers`` exactly,
8-30x faster here: benchmarks/pipeline_throughput.py). Parity is tested id for id over all the shared English and
Chinese text and thousands of seeded hostile strings (tests/pipelines/tokenizer/test_wordpiece_backend.py).

The fast backend is used only for a tokenizer.json whose every part is one that test covers (:func:`fast_unsupported`
is deliberately narrow); anything else, or nanotoken missing, falls back to ``tokenizers`` with one line on the
console: the same ids, slower, never other ids. ``BERTSTREAM_TOKENIZER_BACKEND`` overrides the choice:
``auto`` (default), ``fast`` (nanotoken or an error) or ``hf`` (``tokenizers`` always).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np

from bertstream.pipelines.common import counters as C
from bertstream.schemas import json_text
from bertstream.schemas.vocab import VocabError

ENV = "BERTSTREAM_TOKENIZER_BACKEND"
MODES = ("auto", "fast", "hf")
FAST = "nanotoken"
HF = "tokenizers"

_TOP_LEVEL = {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor"}
_TOP_LEVEL |= {"decoder", "model"}
_NORMALIZER_KEYS = {"type", "clean_text", "handle_chinese_chars", "strip_accents", "lowercase"}
_MODEL_KEYS = {"type", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"}
_ADDED_KEYS = {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}
# They only add [CLS]/[SEP], which the pipeline never asks for (add_special_tokens=False): ids do not depend on them.
_POST_PROCESSORS = (None, "BertProcessing", "TemplateProcessing")


@dataclass(frozen=True, slots=True)
class Backend:
    """A backend by its distribution's name and installed version (what the manifest's ``run.tokenizer`` records)."""

    name: str
    version: str

    def entry(self) -> dict[str, str]:
        return {"backend": self.name, "version": self.version}


def backend(name: str) -> Backend:
    """``name`` (FAST or HF) with its installed version ("" when not installed)."""
    try:
        return Backend(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        return Backend(name, "")


def requested_mode(environ: Mapping[str, str] = os.environ) -> str:
    """``BERTSTREAM_TOKENIZER_BACKEND`` (``auto`` when unset); another value is a VocabError (one ``Error:`` line)."""
    mode = environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise VocabError(f"environment variable {ENV}={environ[ENV]!r} must be one of {', '.join(MODES)}")
    return mode


def fast_unsupported(tokenizer_json: str) -> str | None:
    """Why nanotoken may not encode this tokenizer.json, None when it may.

    Narrower than what nanotoken loads: only BertTokenizerFast's tokenizer (BertNormalizer with cleaning and CJK
    spacing, either casing and accent setting; BertPreTokenizer; WordPiece with ``##`` and 100 characters a word;
    special tokens matched raw, as whole strings, at their vocabulary ids), which the parity tests cover.
    """
    try:
        data = json_text.loads(tokenizer_json)
    except json.JSONDecodeError as e:
        return f"not JSON ({e})"
    if not isinstance(data, dict):
        return "not a JSON object"
    if extra := sorted(set(data) - _TOP_LEVEL):
        return f"unknown top-level keys {extra}"
    for key in ("truncation", "padding"):
        if data.get(key) is not None:
            return f"{key} is set"
    norm = data.get("normalizer")
    if not isinstance(norm, dict) or norm.get("type") != "BertNormalizer" or set(norm) != _NORMALIZER_KEYS:
        return f"normalizer {_describe(norm)} is not BertNormalizer"
    if norm["clean_text"] is not True or norm["handle_chinese_chars"] is not True:
        return "BertNormalizer without clean_text or handle_chinese_chars"
    if norm["strip_accents"] not in (None, True, False) or not isinstance(norm["lowercase"], bool):
        return "BertNormalizer options are not booleans"
    if data.get("pre_tokenizer") != {"type": "BertPreTokenizer"}:
        return f"pre_tokenizer {_describe(data.get('pre_tokenizer'))} is not BertPreTokenizer"
    model = data.get("model")
    if not isinstance(model, dict) or model.get("type") != "WordPiece" or not set(model) <= _MODEL_KEYS:
        return f"model {_describe(model)} is not WordPiece"
    vocab = model.get("vocab")
    if model.get("continuing_subword_prefix") != "##" or model.get("max_input_chars_per_word") != 100:
        return "WordPiece prefix is not '##' or words are not cut at 100 characters"
    if not isinstance(vocab, dict) or model.get("unk_token") not in vocab:
        return "WordPiece vocabulary lacks its unk_token"
    added = data.get("added_tokens") or []
    for t in added:
        if not isinstance(t, dict) or set(t) != _ADDED_KEYS:
            return f"added token {t!r} is malformed"
        if not t["special"] or t["normalized"] or t["lstrip"] or t["rstrip"] or t["single_word"]:
            return f"added token {t['content']!r} is not a plain special token"
        if vocab.get(t["content"]) != t["id"]:
            return f"added token {t['content']!r} is not at its vocabulary id"
    post = data.get("post_processor")
    if (post.get("type") if isinstance(post, dict) else post) not in _POST_PROCESSORS:
        return f"post_processor {_describe(post)} is not BERT's"
    return None


def _describe(part: Any) -> str:
    return repr(part.get("type")) if isinstance(part, dict) else repr(part)


_said: set[str] = set()


def _say_once(message: str) -> None:
    # One line per process and reason: the launcher decides for the whole run; a worker speaks only if it
    # cannot follow that decision (nanotoken missing there).
    if message not in _said:
        _said.add(message)
        C.progress(message)


def choose_backend(tokenizer_json: str, *, offsets: bool = False, source: str = "", mode: str | None = None) -> Backend:
    """The backend that encodes ``tokenizer_json`` (``offsets``: the caller needs character offsets, which only
    ``tokenizers`` gives). ``mode`` defaults to :func:`requested_mode`. A fallback from ``auto`` says why, once;
    ``fast`` that cannot be honoured is a VocabError."""
    mode = requested_mode() if mode is None else mode
    if mode == "hf" or offsets:
        return backend(HF)
    why = fast_unsupported(tokenizer_json)
    fast = backend(FAST)
    if why is None and not fast.version:
        why = f"{FAST} is not installed (pip install {FAST})"
    if why is None:
        try:
            _fast_tokenizer(tokenizer_json)  # here, not first in every worker
            return fast
        except ImportError as e:
            why = f"{FAST} cannot be imported ({e})"
        except Exception as e:  # noqa: BLE001 - any refusal of nanotoken's means: tokenizers encodes
            why = f"{FAST} {fast.version} cannot load it ({type(e).__name__}: {e})"
    if mode == "fast":
        raise VocabError(f"{source or 'the tokenizer'}: {ENV}=fast, but {FAST} cannot encode it exactly: {why}")
    hf = backend(HF)
    _say_once(f"tokenizer: {hf.name} {hf.version} encodes {source or 'the vocabulary'} ({why}): same ids, slower")
    return hf


_forked = [False]
if hasattr(os, "register_at_fork"):
    # A thread pool started before fork() has no threads in the child: a parallel encode there would hang.
    os.register_at_fork(after_in_child=lambda: _forked.__setitem__(0, True))


# nanotoken caches the pieces of whitespace chunks and words per encoding thread, 1,048,576 entries a level by
# default: +56 MB after two passes over the shared 22 MB, and more with the corpus. 65,536 keep the speed
# (114 against 111 MB/s on the same text, one thread) for +14 MB, so a worker's memory stays flat.
FAST_CACHE_ENTRIES = 1 << 16


def _fast_tokenizer(tokenizer_json: str) -> Any:
    import nanotoken

    nanotoken.set_cache_entries(FAST_CACHE_ENTRIES)  # per thread; for the caches filled from now on
    data = json.loads(tokenizer_json)
    data["post_processor"] = data["decoder"] = None  # see _POST_PROCESSORS; decoding is not ours
    return nanotoken.WordPieceTokenizer.from_json(json.dumps(data))


class WordPieceEncoder:
    """Encodes texts with ``backend`` (falling back to ``tokenizers``, once said, where nanotoken is missing);
    ``hf``: the caller's `tokenizers` Tokenizer of the same JSON, used instead of building another."""

    def __init__(self, tokenizer_json: str, backend_name: str, threads: int = 1, hf: Any = None) -> None:
        self.backend = backend(backend_name)
        self.fell_back = False  # the run chose nanotoken, but this process has none
        self._fast = None
        self._hf = None
        if backend_name == FAST:
            try:
                self._fast = _fast_tokenizer(tokenizer_json)
            except ImportError:
                fallback = backend(HF)
                _say_once(
                    f"tokenizer: {FAST} is not installed on this worker: {fallback.name} {fallback.version} encodes"
                )
                self.backend, self.fell_back = fallback, True
        if self._fast is None:
            from tokenizers import Tokenizer

            tok = hf if hf is not None else Tokenizer.from_str(tokenizer_json)
            self._hf = getattr(tok, "encode_batch_fast", tok.encode_batch)
        self.threads = threads

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of every text without special tokens added, back to back ([tokens] int64), and where each text's
        ids start ([texts + 1] int64)."""
        if not texts:
            return np.zeros(0, np.int64), np.zeros(1, np.int64)
        if self._fast is not None:
            parallel = self.threads > 1 and not _forked[0]
            ids, offsets = self._fast.encode_batch(texts, add_special_tokens=False, parallel=parallel)
            return ids.astype(np.int64), offsets.astype(np.int64, copy=False)
        assert self._hf is not None
        return ragged([e.ids for e in self._hf(list(texts), add_special_tokens=False)])


def ragged(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ids as :meth:`WordPieceEncoder.encode` returns them."""
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(offsets[-1]))
    return ids, offsets
