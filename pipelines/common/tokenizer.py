"""The tokenizer every job builds from ``--vocab`` (a vocab.txt or a tokenizer.json, local or URL): loaded once
by the launcher, then shipped to the workers as JSON (``TokenizerSpec``), so that no worker needs the path.
Built as ``transformers.BertTokenizerFast`` builds it (:mod:`bertstream.schemas.wordpiece`): ids are Hugging Face's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from tokenizers import Tokenizer

from bertstream.pipelines.common.files import InputError, read_whole
from bertstream.schemas import json_text
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


def set_tokenizer_threads(threads: int) -> None:
    """Threads `tokenizers` and nanotoken may use in this process (both size a Rayon pool from RAYON_NUM_THREADS,
    once: call before the first encode).

    One per Beam worker process when the runner already runs a worker per core; all of a machine's cores
    when a single in-process worker owns it.
    """
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    if threads > 1:
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
