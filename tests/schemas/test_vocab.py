from __future__ import annotations

import hashlib
import json

import pytest

from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab, VocabError, id_type_for, is_reserved, vocab_sha256


def test_hash_is_sha256_of_canonical_vocab_txt(tmp_path):
    v = Vocab(SPECIAL_TOKENS + ("the", "##s"))
    v.write(tmp_path / "vocab.txt")
    assert v.sha256 == hashlib.sha256((tmp_path / "vocab.txt").read_bytes()).hexdigest() == vocab_sha256(v.tokens)


def test_vocab_txt_and_tokenizer_json_hash_alike(demo_vocab):
    a = Vocab.load(demo_vocab / "vocab.txt")
    b = Vocab.load(demo_vocab / "tokenizer.json")
    assert a.tokens == b.tokens and a.sha256 == b.sha256
    assert Vocab.load(demo_vocab).sha256 == a.sha256  # a folder resolves to its vocab.txt


def test_crlf_vocab_txt_is_read_like_lf(tmp_path):
    p = tmp_path / "vocab.txt"
    p.write_bytes("\r\n".join(SPECIAL_TOKENS + ("word",)).encode() + b"\r\n")
    assert Vocab.load(p).tokens == SPECIAL_TOKENS + ("word",)


@pytest.mark.parametrize(
    "content,message",
    [
        ("", "vocabulary is empty"),
        ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n", r"lacks special token\(s\) \[MASK\]"),
        ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nx\nx\n", "duplicate token 'x'"),
        ("[PAD]\n\n[UNK]\n", "empty line 2"),
    ],
)
def test_malformed_vocab_txt(tmp_path, content, message):
    p = tmp_path / "vocab.txt"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(VocabError, match=message):
        Vocab.load(p)


def test_malformed_tokenizer_json(tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps({"model": {"type": "BPE", "vocab": {}}}))
    with pytest.raises(VocabError, match="not a WordPiece"):
        Vocab.load(p)
    p.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[UNK]": 2}}}))
    with pytest.raises(VocabError, match="not contiguous"):
        Vocab.load(p)
    # Loaded, then 'Exception: WordPiece error: Missing [UNK] token' (a details log) at the first word it could
    # not spell, in bertprep pretraining and task alike.
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    p.write_text(json.dumps({"model": {"type": "WordPiece", "unk_token": "<unk>", "vocab": vocab}}))
    with pytest.raises(VocabError, match="its WordPiece unk_token '<unk>' is not in its vocabulary"):
        Vocab.load(p)
    p.write_text(json.dumps({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": vocab}}))
    assert Vocab.load(p).tokens == SPECIAL_TOKENS


def test_reserved_tokens_and_id_types():
    assert all(is_reserved(t) for t in SPECIAL_TOKENS + ("[unused0]", "[unused993]"))
    assert not any(is_reserved(t) for t in ("the", "##ing", "[", "]", "unused"))
    assert id_type_for(30522) == "uint16" and id_type_for(65535) == "uint16" and id_type_for(65536) == "int32"
