"""BERT's WordPiece tokenizer, built with `tokenizers`: one owner for the pipelines and the trainer
(``berttrain embed`` tokenizes raw text with a checkpoint's vocabulary; the trainer must not import pipelines)."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bertstream.schemas.vocab import CLS, SEP, SPECIAL_TOKENS, Vocab

# BERT's WordPiece gives a word of more characters one [UNK], whatever its letters.
MAX_WORD_CHARS = 100


def bert_tokenizer(vocab: Vocab | None, lowercase: bool) -> Tokenizer:
    """The tokenizer ``BertTokenizerFast(vocab_file, do_lower_case=lowercase)`` builds (untrained: no vocab)."""
    words = vocab.index if vocab is not None else {}
    tok = Tokenizer(models.WordPiece(words, unk_token="[UNK]", max_input_chars_per_word=MAX_WORD_CHARS))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    if vocab is not None:
        tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def with_bert_template(tok: Tokenizer, vocab: Vocab) -> Tokenizer:
    """``tok`` adding ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` (type ids 0, then 1) as BERT's tokenizers do:
    what a saved ``tokenizer.json`` needs so that ``AutoTokenizer`` encodes model inputs."""
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab.id(CLS)), (SEP, vocab.id(SEP))],
    )
    return tok


def json_lowercase(data: dict) -> bool | None:
    """Lowercasing of a tokenizer.json's normalizer, None when it cannot be told."""
    norm = data.get("normalizer")
    stack = [norm]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        if n.get("type") == "BertNormalizer":
            return bool(n.get("lowercase"))
        if n.get("type") == "Lowercase":
            return True
        stack.extend(n.get("normalizers") or [])
    return False if norm is not None else None
