"""``bertprep vocab``: train a WordPiece vocabulary with `tokenizers`, from the pipeline's own readers.

Writes ``vocab.txt``, ``tokenizer.json`` and ``tokenizer_config.json`` that ``BertTokenizerFast`` loads
and that tokenize exactly as the pipeline does. ``[PAD] [UNK] [CLS] [SEP] [MASK]`` take ids 0..4.
A deterministic sample of a large corpus: documents are kept when a hash of their id falls under the
sampled fraction, in sorted file order, until ``sample_bytes`` of text are taken.

Deterministic training: `tokenizers` assigns ids to ``##`` continuation pieces in hash-map order, which
changes merge tie-breaks from run to run (huggingface/tokenizers#1794). A first pass over the sample
collects every character that can continue a word, and their ``##`` pieces are registered up front in
sorted order, so the same corpus always gives the same vocabulary, byte for byte.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import trainers

from pipelines.config import FORMATS, check
from pipelines.hashing import hash64
from pipelines.inputs import resolve_inputs
from pipelines.read import InputError, read_documents
from pipelines.tokenize import bert_tokenizer
from schemas.vocab import CLS, SEP, SPECIAL_TOKENS, VOCAB_FILENAME, Vocab
from schemas.wordpiece import with_bert_template


@dataclass(frozen=True, kw_only=True, slots=True)
class VocabConfig:
    input_format: str = "sentences"
    vocab_size: int = 30522
    lowercase: bool = True
    sample_bytes: int = 0  # 0: the whole corpus
    min_frequency: int = 2
    limit_alphabet: int = 1000
    seed: int = 12345

    def __post_init__(self) -> None:
        check(self.input_format in FORMATS, "input_format", f"must be one of {FORMATS}, got {self.input_format!r}")
        lo = len(SPECIAL_TOKENS) + 10
        check(lo <= self.vocab_size <= 1_000_000, "vocab_size", f"must be in [{lo}, 1000000], got {self.vocab_size}")
        check(self.sample_bytes >= 0, "sample_bytes", f"must be >= 0, got {self.sample_bytes}")
        check(self.min_frequency >= 1, "min_frequency", f"must be >= 1, got {self.min_frequency}")


def sample_texts(inputs: list[str], cfg: VocabConfig, counters: Counter) -> Iterator[str]:
    files = resolve_inputs(inputs, cfg.input_format)
    total = sum(f.bytes for f in files)
    fraction = 1.0 if not cfg.sample_bytes or cfg.sample_bytes >= total else cfg.sample_bytes / total
    threshold = int(fraction * 2**64)
    taken = 0
    for f in files:
        for doc in read_documents(f.path, f.format, counters):
            if fraction < 1.0 and hash64(cfg.seed, doc.doc_id) >= threshold:
                continue
            for p in doc.paragraphs:
                taken += len(p.encode("utf-8")) + 1
                yield p
            counters["documents_sampled"] += 1
            if cfg.sample_bytes and taken >= cfg.sample_bytes:
                return


def _can_continue_word(c: str) -> bool:
    """Characters BERT pre-tokenization can leave inside a word (not space, punctuation, CJK, control)."""
    if c.isspace() or unicodedata.category(c)[0] in "PC":
        return False
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:  # BERT's ASCII punctuation
        return False
    cjk = (
        (0x4E00, 0x9FFF),
        (0x3400, 0x4DBF),
        (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF),
        (0xF900, 0xFAFF),
        (0x2F800, 0x2FA1F),
    )
    return not any(a <= cp <= b for a, b in cjk)


def continuation_pieces(texts, lowercase: bool) -> list[str]:
    """Sorted ``##c`` for every character that occurs in the normalised text and can continue a word."""
    normalize = bert_tokenizer(None, lowercase).normalizer.normalize_str
    chars: set[str] = set()
    for t in texts:
        chars.update(normalize(t))
    return sorted("##" + c for c in chars if _can_continue_word(c))


def train_vocab(inputs: list[str], output_dir: str | Path, cfg: VocabConfig) -> tuple[Vocab, Counter]:
    counters: Counter = Counter()
    first: Counter = Counter()
    pieces = continuation_pieces(sample_texts(inputs, cfg, first), cfg.lowercase)
    if not first["documents_sampled"] or not first["bytes_read"]:
        # Else `tokenizers` trains a vocabulary of the special tokens alone and nothing says why.
        raise InputError(
            f"--input {', '.join(inputs)}: no text to train a vocabulary on "
            f"({first['documents_read']} documents, {first['bytes_read']} bytes read)"
        )
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *pieces],
        limit_alphabet=cfg.limit_alphabet,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    trained = bert_tokenizer(None, cfg.lowercase)
    trained.train_from_iterator(sample_texts(inputs, cfg, counters), trainer=trainer)
    vocab = Vocab(tuple(t for t, _ in sorted(trained.get_vocab().items(), key=lambda kv: kv[1])))
    # Rebuilt from the vocabulary: the ## pieces were "special" only to steer training.
    tok = with_bert_template(bert_tokenizer(vocab, cfg.lowercase), vocab)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab.write(out / VOCAB_FILENAME)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "BertTokenizer",
                "do_lower_case": cfg.lowercase,
                "model_max_length": 512,
                "unk_token": "[UNK]",
                "sep_token": SEP,
                "pad_token": "[PAD]",
                "cls_token": CLS,
                "mask_token": "[MASK]",
            },
            indent=2,
        )
        + "\n"
    )
    (out / "vocab_config.json").write_text(
        json.dumps(
            {
                "inputs": inputs,
                **{k: getattr(cfg, k) for k in cfg.__slots__},
                "vocab_sha256": vocab.sha256,
                "counters": dict(counters),
            },
            indent=2,
        )
        + "\n"
    )
    return vocab, counters
