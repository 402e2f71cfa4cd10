from __future__ import annotations

import json

import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.vocab import VocabConfig, train_vocab
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab
from tests.conftest import shared_path

transformers = pytest.importorskip("transformers")


def test_trained_vocab_loads_in_hugging_face_with_the_pipelines_ids(demo_vocab, demo_corpus):
    from collections import Counter

    from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
    from bertstream.pipelines.tokenizer.load import load_tokenizer

    v = Vocab.load(demo_vocab / "vocab.txt")
    assert v.tokens[:5] == SPECIAL_TOKENS and len(v) == 4000
    hf = transformers.BertTokenizerFast.from_pretrained(str(demo_vocab))
    text = (demo_corpus / "assignment.txt").read_text()[:3000]
    ours = DocumentTokenizer(load_tokenizer(str(demo_vocab / "vocab.txt")))([("d", [text])], Counter())
    assert ours.ids.tolist() == hf(text, add_special_tokens=False)["input_ids"]
    assert hf.convert_tokens_to_ids("[MASK]") == v.id("[MASK]")
    config = json.loads((demo_vocab / "vocab_config.json").read_text())
    assert config["vocab_sha256"] == v.sha256 and config["input_format"] == "text"


def test_training_is_deterministic_and_sampling_is_stable(tmp_path):
    wiki = str(shared_path("pretrain", "wikipedia") / "wiki_0[01]")
    cfg = VocabConfig(input_format="wikiextractor", vocab_size=3000, sample_bytes=600_000)
    a, ca = train_vocab([wiki], tmp_path / "a", cfg)
    b, cb = train_vocab([wiki], tmp_path / "b", cfg)
    assert a.sha256 == b.sha256
    assert (
        a.tokens == b.tokens
        and (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    )
    assert 0 < ca["documents_sampled"] < ca["documents_read"]
    full, cf = train_vocab([wiki], tmp_path / "c", VocabConfig(input_format="wikiextractor", vocab_size=3000))
    assert cf["documents_sampled"] == cf["documents_read"] and full.sha256 != a.sha256


def test_a_sampled_vocabulary_is_the_same_wherever_the_corpus_lives(tmp_path, demo_corpus):
    """The sample is chosen by a hash of each document's id: the id must not hold the folder the corpus was
    copied to (an absolute path did), or the same corpus gave another vocabulary in another folder."""
    import shutil

    cfg = VocabConfig(input_format="text", vocab_size=2000, sample_bytes=150_000)
    out = []
    for where in ("here", "elsewhere/deeper"):
        corpus = tmp_path / where / "corpus"
        shutil.copytree(demo_corpus, corpus)
        vocab, counters = train_vocab([str(corpus / "*.txt")], tmp_path / where / "vocab", cfg)
        out.append((vocab.sha256, counters["documents_sampled"], counters["documents_read"]))
    assert out[0] == out[1] and 0 < out[0][1] < out[0][2]


def test_cased_vocab_keeps_case(tmp_path, demo_corpus):
    v, _ = train_vocab(
        [str(demo_corpus / "*.txt")], tmp_path, VocabConfig(input_format="text", vocab_size=2000, lowercase=False)
    )
    assert any(t[0].isupper() for t in v.tokens if t[0].isalpha())
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["do_lower_case"] is False


def test_config_errors_name_the_field():
    with pytest.raises(UsageError, match="vocab_size: must be in"):
        VocabConfig(vocab_size=3)


def test_one_input_spelled_two_ways_is_sampled_once(tmp_path, monkeypatch):
    from collections import Counter

    from bertstream.pipelines.vocab import VocabConfig, sample_texts

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "s.txt").write_text("One sentence.\nTwo.\n\nAnother document.\n")
    monkeypatch.chdir(tmp_path)
    once, twice = Counter(), Counter()
    cfg = VocabConfig(input_format="sentences")
    assert list(sample_texts(["in/s.txt"], cfg, once)) == list(sample_texts(["in/s.txt", "./in/s.txt"], cfg, twice))
    assert once == twice and once["documents_sampled"] == 2


def test_words_past_the_wordpiece_limit_are_cut_before_training_and_counted(tmp_path, demo_corpus):
    """A word of more than 100 characters tokenizes as one [UNK]: it is cut from the training text (counted),
    so the vocabulary is the one the text without it gives. Before, the trainer spent time quadratic in such a
    word's length (300,000 letters: 59 s) learning pieces of it (issue 53)."""
    text = (demo_corpus / sorted(p.name for p in demo_corpus.glob("*.txt"))[0]).read_text()[:20_000]
    (tmp_path / "plain").mkdir()
    (tmp_path / "long").mkdir()
    (tmp_path / "plain" / "a.txt").write_text(text + "\n\nThe end.\n")
    # a base64-like run (no punctuation inside: one word), and a run that punctuation splits into short words
    (tmp_path / "long" / "a.txt").write_text(
        text + "\n\nThe " + "qzxv" * 2500 + " end.\n" + "ok," * 100 + "\n" + "Ab" * 60 + ".\n"
    )
    (tmp_path / "plain" / "a.txt").write_text(text + "\n\nThe end.\n" + "ok," * 100 + "\n.\n")
    cfg = VocabConfig(input_format="text", vocab_size=1000, min_frequency=1)
    plain, _ = train_vocab([str(tmp_path / "plain" / "a.txt")], tmp_path / "v1", cfg)
    cut, counters = train_vocab([str(tmp_path / "long" / "a.txt")], tmp_path / "v2", cfg)
    assert counters["vocab_long_words"] == 2
    assert cut.tokens == plain.tokens and not any("qzxv" in t for t in cut.tokens)


def test_a_long_paragraph_reaches_the_trainer_in_pieces_cut_where_words_end(tmp_path):
    """Round 8: one unspaced 2M-character CJK record was handed whole to LongWords (a single run of non-space
    characters, pre-tokenized at once, twice) and to the trainer: 1.3 GB and 46 s for 6 MB, and the 64 MiB record
    cap allowed ten times that. Now in pieces of at most PIECE_CHARS characters, cut before a character that ends
    a word, so the words (and the vocabulary) are those of the whole; a word longer than a piece stays whole."""
    import json
    import random
    from collections import Counter

    from bertstream.pipelines.vocab import PIECE_CHARS, VocabConfig, sample_texts

    rnd = random.Random(8)
    cjk = "".join(chr(0x4E00 + rnd.randrange(20000)) for _ in range(3 * PIECE_CHARS))
    latin = " ".join("word" + str(i % 97) for i in range(40_000)) + " " + "q" * (PIECE_CHARS + 10) + " end."
    for text in (cjk, latin):
        (tmp_path / "in.jsonl").write_text(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        counters: Counter = Counter()
        texts = list(sample_texts([str(tmp_path / "in.jsonl")], VocabConfig(input_format="jsonl"), counters))
        assert len(texts) > 1 and all(len(t) <= PIECE_CHARS for t in texts if "q" * 200 not in t)
        if text is cjk:
            assert "".join(texts) == text
        else:  # the long word is cut out whole, once, as before
            kept = [w for w in text.split() if len(w) < 200]
            assert counters["vocab_long_words"] == 1 and "".join(texts).split() == kept


def test_more_distinct_characters_than_the_alphabet_limit_give_one_vocabulary(tmp_path):
    """Round 8: `tokenizers` keeps the commonest ``limit_alphabet`` characters with ties in hash-map order, so a
    Chinese corpus (20,000 characters of about equal counts past the limit of 1,000) gave another vocabulary on
    every run. The alphabet is chosen first now (commonest, then by code point) and given to the trainer."""
    import random

    from bertstream.pipelines.vocab import VocabConfig

    rnd = random.Random(8)
    chars = [chr(0x4E00 + i) for i in range(400)]
    lines = ["".join(rnd.sample(chars, 40)) + "。" for _ in range(300)]
    (tmp_path / "zh.txt").write_text("\n".join(lines) + "\n")
    cfg = VocabConfig(input_format="lines", vocab_size=500, min_frequency=1, limit_alphabet=100)
    runs = [train_vocab([str(tmp_path / "zh.txt")], tmp_path / f"v{i}", cfg)[0].tokens for i in range(4)]
    assert all(r == runs[0] for r in runs)
    counts = {c: sum(line.count(c) for line in lines) for c in chars}
    expect = sorted(sorted(chars, key=lambda c: (-counts[c], c))[:99] + ["。"])  # the full stop is the commonest
    assert sorted(t for t in runs[0] if len(t) == 1) == expect
