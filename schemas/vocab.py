"""Vocabulary identity shared by the pipelines and the trainer.

A dataset and a model agree on their tokenizer when the SHA-256 of their ordered token lists agree.
The hash is computed over the tokens (one per line, in id order, UTF-8, newline-terminated), which is
exactly the bytes of a canonical ``vocab.txt``; a ``tokenizer.json`` over the same WordPiece vocab
therefore hashes the same.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from bertstream.schemas import json_text
from bertstream.schemas.id_types import id_type_for
from bertstream.schemas.whole_file import WholeFileError, read_whole

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, CLS, SEP, MASK)
VOCAB_FILENAME = "vocab.txt"

_UNUSED = re.compile(r"^\[unused\d+\]$")


class VocabError(ValueError):
    """A vocabulary file is missing, malformed or lacks a special token."""


class VocabMismatchError(ValueError):
    """Data tokenised with another vocabulary than the model's (or than another dataset's)."""


def vocab_sha256(tokens: Sequence[str]) -> str:
    h = hashlib.sha256()
    for tok in tokens:
        h.update(tok.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def is_reserved(token: str) -> bool:
    """Special tokens and ``[unused*]`` placeholders: never drawn as random MLM replacements."""
    return (
        token in SPECIAL_TOKENS
        or bool(_UNUSED.match(token))
        or (token.startswith("[") and token.endswith("]") and len(token) > 2 and token[1:-1].isupper())
    )


@dataclass(frozen=True)
class Vocab:
    """An ordered WordPiece token list with its special ids."""

    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.tokens:
            raise VocabError("vocabulary is empty")
        missing = [t for t in SPECIAL_TOKENS if t not in self.index]
        if missing:
            raise VocabError(f"vocabulary lacks special token(s) {', '.join(missing)}")
        if len(self.index) != len(self.tokens):
            seen: set[str] = set()
            dup = next(t for t in self.tokens if t in seen or seen.add(t))  # type: ignore[func-returns-value]
            raise VocabError(f"vocabulary has duplicate token {dup!r}")

    @cached_property
    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def sha256(self) -> str:
        return vocab_sha256(self.tokens)

    @property
    def id_type(self) -> str:
        return id_type_for(len(self.tokens))

    def id(self, token: str) -> int:
        return self.index[token]

    @property
    def special_ids(self) -> dict[str, int]:
        return {t: self.index[t] for t in SPECIAL_TOKENS}

    def text(self) -> str:
        return "".join(t + "\n" for t in self.tokens)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.text(), encoding="utf-8")

    @classmethod
    def from_text(cls, text: str, source: str = "<text>") -> Vocab:
        if "\x00" in text:
            raise VocabError(f"{source}: not a vocab.txt (contains NUL bytes)")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        # Hugging Face writes vocab.txt with one token per line; a token never holds whitespace
        # except through \r from Windows line endings, which we strip.
        tokens = tuple(line.rstrip("\r") for line in lines)
        if any(t == "" for t in tokens):
            raise VocabError(f"{source}: empty line {tokens.index('') + 1} in vocab.txt")
        try:
            return cls(tokens)
        except VocabError as e:
            raise VocabError(f"{source}: {e}") from None

    @classmethod
    def from_tokenizer_json(cls, data: dict, source: str = "<tokenizer.json>") -> Vocab:
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
            raise VocabError(f"{source}: not a WordPiece tokenizer.json (model.type must be 'WordPiece')")
        by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise VocabError(f"{source}: WordPiece ids are not contiguous from 0")
        unk = model.get("unk_token", UNK)
        if not isinstance(unk, str) or unk not in model["vocab"]:
            # tokenizers loads it, then fails on the first word it cannot spell, deep in a run.
            raise VocabError(f"{source}: its WordPiece unk_token {unk!r} is not in its vocabulary")
        try:
            return cls(tuple(t for t, _ in by_id))
        except VocabError as e:
            raise VocabError(f"{source}: {e}") from None

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        """Load ``vocab.txt`` or ``tokenizer.json`` (or a folder holding one of them)."""
        p = Path(path)
        if p.is_dir():
            for name in (VOCAB_FILENAME, "tokenizer.json"):
                if (p / name).is_file():
                    return cls.load(p / name)
            raise VocabError(f"{p}: folder holds neither {VOCAB_FILENAME} nor tokenizer.json")
        if not p.exists():  # a FIFO or a device is no file either: refused by name when read
            raise VocabError(f"{p}: vocabulary file does not exist")
        try:
            raw = read_whole(p, "vocabulary file")
        except WholeFileError as e:  # a FIFO, a device, a file past the cap
            raise VocabError(str(e)) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise VocabError(f"{p}: not UTF-8 ({e})") from None
        if p.suffix == ".json":
            try:
                data = json_text.loads(text)
            except json.JSONDecodeError as e:
                raise VocabError(f"{p}: malformed JSON ({e})") from None
            return cls.from_tokenizer_json(data, str(p))
        return cls.from_text(text, str(p))
