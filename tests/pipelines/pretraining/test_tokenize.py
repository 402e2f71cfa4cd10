from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.inputs.read import read_documents
from bertstream.pipelines.pretraining.segmenter import split_sentences
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer.load import load_tokenizer
from bertstream.schemas.vocab import VocabError
from tests.conftest import shared_path

transformers = pytest.importorskip("transformers")


def wiki_sentences(limit_docs: int = 60) -> list[tuple[str, list[str]]]:
    path = shared_path("pretrain", "wikipedia", "wiki_05")
    docs = []
    for d in read_documents(str(path), "wikiextractor", Counter()):
        docs.append((d.doc_id, [s for p in d.paragraphs for s in split_sentences(p)]))
        if len(docs) >= limit_docs:
            break
    return docs


def hf_from_vocab_txt(vocab_txt, lowercase: bool, tmp_path):
    """BertTokenizerFast built from a bare vocab.txt, as `from_pretrained` does (transformers 4 and 5)."""
    import json
    import shutil

    d = tmp_path / f"hf_{lowercase}"
    d.mkdir()
    shutil.copy(vocab_txt, d / "vocab.txt")
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}))
    return transformers.BertTokenizerFast.from_pretrained(str(d))


def sentences_of(batch, i):
    """Token ids of each sentence of document i of a TokenizedBatch."""
    s0 = int(batch.doc_sentences[:i].sum())
    lens = batch.sentence_lengths[s0 : s0 + batch.doc_sentences[i]]
    t0 = int(batch.sentence_lengths[:s0].sum())
    out = []
    for n in lens:
        out.append(batch.ids[t0 : t0 + n].tolist())
        t0 += n
    return out


@pytest.mark.parametrize("source,lowercase", [("vocab.txt", True), ("vocab.txt", False), ("tokenizer.json", True)])
def test_ids_identical_to_bert_tokenizer_fast_on_wikipedia(wiki_vocab, source, lowercase, tmp_path):
    spec = load_tokenizer(str(wiki_vocab / source), lowercase if source == "vocab.txt" else None)
    hf = hf_from_vocab_txt(wiki_vocab / "vocab.txt", lowercase, tmp_path)
    docs = wiki_sentences()
    batch = DocumentTokenizer(spec)(docs, Counter())
    assert batch.doc_ids == [d for d, _ in docs]
    compared = 0
    for i, (_, sentences) in enumerate(docs):
        ours = sentences_of(batch, i)
        theirs = [ids for ids in hf(sentences, add_special_tokens=False)["input_ids"] if ids]
        assert ours == theirs, f"document {i} differs"
        compared += sum(len(s) for s in ours)
    assert compared > 50_000


def test_hf_loads_tokenizer_json_with_same_ids(wiki_vocab):
    spec = load_tokenizer(str(wiki_vocab / "tokenizer.json"))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(wiki_vocab / "tokenizer.json"))
    hf_dir = transformers.BertTokenizerFast.from_pretrained(str(wiki_vocab))
    docs = wiki_sentences(10)
    batch = DocumentTokenizer(spec)(docs, Counter())
    flat = [s for _, ss in docs for s in ss]
    ours = [ids for i in range(len(docs)) for ids in sentences_of(batch, i)]
    assert ours == [x for x in hf(flat, add_special_tokens=False)["input_ids"] if x]
    assert ours == [x for x in hf_dir(flat, add_special_tokens=False)["input_ids"] if x]
    # HF adds [CLS]/[SEP] from our post-processor exactly like BERT.
    enc = hf_dir("first part", "second part")
    assert enc["input_ids"][0] == spec.vocab.id("[CLS]") and enc["token_type_ids"][-1] == 1


def test_sep_join_equals_tokenizing_each_sentence(demo_vocab):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    tok = DocumentTokenizer(spec)
    sentences = ["Hello, world!", "  ", "Über naïve café — 3.5 m.", "它是中文。", "x" * 150 + " end."]
    batch = tok([("d", sentences)], c := Counter())
    alone = [tok.tokenizer.encode(s, add_special_tokens=False).ids for s in sentences]
    assert sentences_of(batch, 0) == [a for a in alone if a]
    assert c[C.EMPTY_SENTENCES] == 1
    unk = spec.vocab.id("[UNK]")
    assert sentences_of(batch, 0)[-1][0] == unk  # a 150-character word is [UNK]
    assert len(sentences_of(batch, 0)[2]) >= 2  # CJK characters are split into single-character tokens


def test_literal_special_tokens_are_removed_and_counted(demo_vocab):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    tok = DocumentTokenizer(spec)
    c = Counter()
    batch = tok([("d", ["a [SEP] b [MASK] c", "plain"])], c)
    assert c[C.SPECIAL_LITERALS] == 2
    assert len(sentences_of(batch, 0)) == 2  # the literal [SEP] did not split the sentence
    specials = set(spec.vocab.special_ids.values())
    assert not specials & set(batch.ids.tolist())


def test_documents_without_tokens_are_dropped_with_reasons(demo_vocab):
    tok = DocumentTokenizer(load_tokenizer(str(demo_vocab / "vocab.txt")))
    c = Counter()
    batch = tok([("empty", []), ("blank", ["\u200b", "   "]), ("one", ["Just one sentence."])], c)
    assert batch.doc_ids == ["one"]
    assert c[C.drop(C.EMPTY)] == 1 and c[C.drop(C.NO_TOKENS)] == 1
    assert c[C.DOCUMENTS_USED] == 1 and c[C.SINGLE_SENTENCE_DOCS] == 1
    assert batch.ids.dtype == np.uint16


def test_vocab_errors_are_clear(tmp_path, demo_vocab):
    with pytest.raises(VocabError, match="does not exist|cannot read"):
        load_tokenizer(str(tmp_path / "missing.txt"))
    bad = tmp_path / "vocab.txt"
    bad.write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"lacks special token"):
        load_tokenizer(str(bad))
    js = tmp_path / "tokenizer.json"
    js.write_text("{not json", encoding="utf-8")
    with pytest.raises(VocabError, match="malformed JSON"):
        load_tokenizer(str(js))
    with pytest.raises(VocabError, match="lowercases, but --cased"):
        load_tokenizer(str(demo_vocab / "tokenizer.json"), lowercase=False)


def test_long_documents_are_encoded_in_pieces_with_the_same_ids(demo_vocab, demo_corpus):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    tok = DocumentTokenizer(spec)
    sentences = [
        s
        for p in sorted(demo_corpus.glob("*.txt"))
        for line in p.read_text().split("\n\n")
        for s in split_sentences(" ".join(line.split()))
    ]
    assert sum(len(s) for s in sentences) > 4 * DocumentTokenizer.PIECE_CHARS  # several pieces
    batch = tok([("book", sentences)], Counter())
    alone = [e.ids for e in tok.tokenizer.encode_batch(sentences, add_special_tokens=False)]
    assert sentences_of(batch, 0) == [a for a in alone if a]


def test_truncation_and_padding_in_a_published_tokenizer_json_are_ignored(demo_vocab, tmp_path):
    import json

    data = json.loads((demo_vocab / "tokenizer.json").read_text())
    # As sentence-transformers and many hub models ship it: truncate at 8 tokens, pad to 16.
    data["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
    data["padding"] = {
        "strategy": {"Fixed": 16},
        "direction": "Right",
        "pad_to_multiple_of": None,
        "pad_id": 0,
        "pad_type_id": 0,
        "pad_token": "[PAD]",
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    sentence = "The assignment statement evaluates the expression list and assigns the single resulting object."
    plain = DocumentTokenizer(load_tokenizer(str(demo_vocab / "tokenizer.json")))([("d", [sentence])], Counter())
    published = DocumentTokenizer(load_tokenizer(str(tmp_path / "tokenizer.json")))([("d", [sentence])], Counter())
    assert len(plain.ids) > 8 and published.ids.tolist() == plain.ids.tolist()


def test_sentences_longer_than_an_instance_are_counted(demo_vocab):
    """What is read is what is meant (issue 33): a 200 MB line without a sentence end became one instance,
    the rest truncated without a counter. The Tokenize stage's DoFn counts them with the tokens past the limit."""
    from bertstream.pipelines.pretraining.tokenize import _TokenizeFn

    fn = _TokenizeFn(load_tokenizer(str(demo_vocab / "vocab.txt")), 1, max_num_tokens=61)
    fn.setup()
    try:
        out, delta = fn._encode(([("long", ["word " * 500, "A short one."])], Counter()))
    finally:
        fn.teardown()
    lengths = out.sentence_lengths
    assert delta[C.LONG_SENTENCES] == 1 and delta[C.TOKENS_PAST_MAX_LENGTH] == int(lengths.max()) - 61 > 400


def test_beam_metrics_do_not_grow_with_the_number_of_sources(demo_vocab):
    """Every allocation is bounded (issue 33): 100,000 one-line files at the top held a Beam metric per source
    (three each) while the run lasted; the per-source figures travel in the batches' counters to the manifest."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    from bertstream.pipelines.common import source_stats as SS
    from bertstream.pipelines.pretraining.tokenize import Tokenize

    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    docs = [(f"f{i:04d}.txt", ["The first sentence of a file.", "Its second one."]) for i in range(300)]
    batches = [(docs[i : i + 50], Counter()) for i in range(0, 300, 50)]
    p = beam.Pipeline(runner=FnApiRunner())
    tokenized = p | beam.Create(batches) | Tokenize(spec)
    sources = tokenized | beam.Map(lambda b: len(SS.per_source(b.counters))) | beam.CombineGlobally(sum)
    assert_that(sources, equal_to([300]))  # every source's figures still reach the manifest's counters
    result = p.run()
    result.wait_until_finish()
    names = [m.key.metric.name for m in result.metrics().query()["counters"]]
    assert "documents_used" in names and not [n for n in names if n.startswith("source_")]


def test_a_sentence_past_what_an_instance_holds_is_cut_before_tokenizing(demo_vocab):
    """One unpunctuated CJK record of 5M characters is one "sentence": tokenizing it whole took 3.1 GB (10M: the
    tokenizer aborted the process), though an instance keeps at most max_num_tokens of it. The Tokenize stage
    cuts it to sentence_char_limit characters first, counted; a sentence below the limit is tokenized whole."""
    from bertstream.pipelines.pretraining.tokenize import _TokenizeFn, sentence_char_limit

    limit = sentence_char_limit(61)
    text = shared_path("pretrain", "chinese", "CLUECorpusSmall_sampled.txt").read_text()
    cjk = "".join(c for c in text if "\u4e00" <= c <= "\u9fff")[: limit + 5000]  # no punctuation: one sentence
    assert len(cjk) == limit + 5000
    fn = _TokenizeFn(load_tokenizer(str(demo_vocab / "vocab.txt")), 1, max_num_tokens=61)
    fn.setup()
    try:
        out, delta = fn._encode(([("cjk", [cjk, "A short one."]), ("short", [cjk[:limit]])], Counter()))
    finally:
        fn.teardown()
    assert delta[C.SENTENCES_CUT] == 1 and delta[C.CHARS_CUT] == 5000
    assert out.sentence_lengths.tolist() == [limit, 4, limit]  # a CJK character is a token; the limit's whole
    assert delta[C.LONG_SENTENCES] == 2
