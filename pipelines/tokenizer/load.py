"""The tokenizer every job builds from ``--vocab`` (a vocab.txt or a tokenizer.json, local or URL): loaded once
by the launcher, then shipped to the workers as JSON (``TokenizerSpec``), so that no worker needs the path.
Built as ``transformers.BertTokenizerFast`` builds it (:mod:`bertstream.schemas.wordpiece`): ids are Hugging Face's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import InputError, read_whole
from bertstream.pipelines.common.redact import redact_text
from bertstream.schemas import json_text
from bertstream.schemas.manifest import vocab_entry as schema_vocab_entry
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab, VocabError
from bertstream.schemas.wordpiece import bert_tokenizer
from bertstream.schemas.wordpiece import json_lowercase as _json_lowercase


@dataclass(frozen=True, slots=True)
class TokenizerSpec:
    """What the workers need to rebuild the tokenizer: its JSON, so no worker needs the vocab path."""

    json: str
    vocab: Vocab
    lowercase: bool
    source: str


def _read(path: str) -> bytes:
    try:
        return read_whole(path, "--vocab")
    except InputError as e:
        raise VocabError(str(e).removeprefix("--vocab ")) from None
    except Exception as e:
        raise VocabError(f"{path}: cannot read vocabulary ({type(e).__name__}: {e})") from None


def load_tokenizer(path: str, lowercase: bool | None = None) -> TokenizerSpec:
    """Load ``vocab.txt`` or ``tokenizer.json`` (local or any Beam filesystem), validating it fully.

    ``lowercase=None`` takes the casing from tokenizer.json (lowercase for a bare vocab.txt, as BERT's
    uncased models). An explicit casing that contradicts a tokenizer.json is an error, not a guess.
    """
    raw = _read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VocabError(f"{path}: not UTF-8 ({e})") from None
    if path.endswith(".json"):
        try:
            data = json_text.loads(text)
        except json.JSONDecodeError as e:
            raise VocabError(f"{path}: malformed JSON ({e})") from None
        vocab = Vocab.from_tokenizer_json(data, path)
        json_lower = _json_lowercase(data)
        if lowercase is not None and json_lower is not None and lowercase != json_lower:
            raise VocabError(
                f"{path}: its normalizer {'lowercases' if json_lower else 'keeps case'}, "
                f"but {'--lowercase' if lowercase else '--cased'} was given"
            )
        try:
            tok = Tokenizer.from_str(text)
        except Exception as e:
            raise VocabError(f"{path}: tokenizers cannot load it ({e})") from None
        # Published tokenizer.json files often carry truncation/padding for inference (e.g. 128 tokens):
        # pretraining must see every token of a document.
        tok.no_truncation()
        tok.no_padding()
        added = {t.content for t in tok.get_added_tokens_decoder().values()}
        missing = [t for t in SPECIAL_TOKENS if t not in added]
        if missing:
            tok.add_special_tokens(missing)
        lower = json_lower if json_lower is not None else bool(lowercase)
    else:
        vocab = Vocab.from_text(text, path)
        lower = True if lowercase is None else lowercase
        tok = bert_tokenizer(vocab, lower)
    return TokenizerSpec(json=tok.to_str(), vocab=vocab, lowercase=lower, source=path)


def cased_tokens(vocab: Vocab) -> tuple[int, int]:
    """``(tokens holding an uppercase letter, tokens holding any letter)`` of ``vocab``, its bracketed
    markers (``[UNK]``, ``[unused3]``, ``<S>``) aside: a vocabulary trained on lowercased text holds no
    uppercase letter at all."""
    upper = letters = 0
    for token in vocab.tokens:
        if token[:1] + token[-1:] in ("[]", "<>"):
            continue
        word = token.removeprefix("##")
        if any(c.isalpha() for c in word):
            letters += 1
            upper += any(c.lower() != c for c in word)
    return upper, letters


def check_casing(spec: TokenizerSpec, casing: bool | None, param: str = "lowercase") -> None:
    """Refuse a casing that contradicts the vocabulary (``casing``: the --lowercase/--cased flag, None when not
    given): ``--cased`` with a vocabulary that holds no uppercase letter makes every capitalised word [UNK]
    (8.8% of a Wikipedia text's tokens, exit 0 and no word before); lowercasing text for a vocabulary whose
    words are cased leaves its capitalised tokens unused and reads "Apple" as "apple". A tokenizer.json that
    says its casing was checked against the flag by :func:`load_tokenizer` already, and is trusted when no
    flag is given. ``param``: the job's field of the flag."""
    upper, letters = cased_tokens(spec.vocab)
    if not spec.lowercase and casing is not None and letters and not upper:
        raise UsageError(
            param,
            f"--cased, but {spec.source} holds no token with an uppercase letter: an uncased vocabulary, under "
            "which every capitalised word would be [UNK]; drop --cased (the text is then lowercased as the "
            "vocabulary's was), or give a cased vocabulary",
        )
    trusted = casing is None and spec.source.endswith(".json")
    if spec.lowercase and not trusted and upper >= max(10, letters // 100):
        told = "--lowercase was given" if casing else "a vocab.txt is read lowercased unless --cased is given"
        raise UsageError(
            param,
            f"{spec.source} is a cased vocabulary ({upper:,} of its {letters:,} word tokens hold an uppercase "
            f"letter), but {told}: lowercased text would never reach those tokens; give --cased",
        )


def set_tokenizer_threads(threads: int) -> None:
    """Threads `tokenizers` and nanotoken may use in this process (both size a Rayon pool from RAYON_NUM_THREADS,
    once: call before the first encode).

    One per Beam worker process when the runner already runs a worker per core; all of a machine's cores
    when a single in-process worker owns it.
    """
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    if threads > 1:
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads))


def vocab_entry(spec: TokenizerSpec) -> dict[str, Any]:
    """The manifest's ``vocab`` (``bertstream.schemas.manifest.vocab_entry``: what the trainer checks its tokenizer
    against) for a run's tokenizer, its source redacted."""
    return schema_vocab_entry(spec.vocab, lowercase=spec.lowercase, source=redact_text(spec.source))
