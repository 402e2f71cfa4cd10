"""Chinese text through every pretraining stage, on the shared Chinese data: the bert-base-chinese vocabulary,
segmentation, ids against BertTokenizerFast, and whole-word masking with words from jieba/rjieba."""

from __future__ import annotations

import sys
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from bertstream.pipelines.inputs.read import read_documents
from bertstream.pipelines.pretraining.chinese_words import SegmenterMissing, load_segmenter, unmark
from bertstream.pipelines.pretraining.instances import Pool, assemble, unit_instances
from bertstream.pipelines.pretraining.masking import mask, masking_spec
from bertstream.pipelines.pretraining.segmenter import sentence_spans, split_sentences
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer.load import load_tokenizer
from bertstream.schemas.masking import MaskingSettings, num_to_predict
from bertstream.schemas.vocab import Vocab
from tests.conftest import shared_path
from tests.pipelines.pretraining.test_segmenter import assert_invariants

# (file below pretrain/chinese, format)
CHINESE = [
    ("zhwiki/wiki_00", "wikiextractor"),
    ("wiki_zh_2019/wiki_00", "jsonl"),
    ("CLUECorpusSmall_bert_sampled.txt", "sentences"),
    ("CLUECorpusSmall_sampled.txt", "lines"),
]


def vocab_path() -> str:
    return str(shared_path("vocab", "bert-base-chinese-vocab.txt"))


@cache
def chinese_docs(name: str, fmt: str) -> list[tuple[str, list[str]]]:
    """``(doc_id, sentences)`` of a shared Chinese file, segmented as the pipeline segments it."""
    path = shared_path("pretrain", "chinese", *name.split("/"))
    docs = []
    for d in read_documents(str(path), fmt, Counter()):
        if d.presegmented:
            docs.append((d.doc_id, d.paragraphs))
        else:
            docs.append((d.doc_id, [s for p in d.paragraphs for s in split_sentences(p)]))
    return docs


def test_one_document_per_line_in_any_byte_range():
    path = str(shared_path("pretrain", "chinese", "CLUECorpusSmall_sampled.txt"))
    whole = [(d.doc_id, d.paragraphs) for d in read_documents(path, "lines", Counter())]
    assert len(whole) == 2500 and all(len(p) == 1 for _, p in whole)
    size = Path(path).stat().st_size
    cuts = [0, 12_345, 700_001, size // 2, size]
    parts = [
        (d.doc_id, d.paragraphs)
        for a, b in zip(cuts, cuts[1:])
        for d in read_documents(path, "lines", Counter(), start=a, end=b)
    ]
    assert parts == whole
    assert sum(len(split_sentences(p[0])) for _, p in whole) > 10_000


def test_vocab_keeps_all_21128_entries_with_its_line_separators():
    vocab = Vocab.load(vocab_path())
    assert len(vocab) == 21128
    # U+2028 is a line break to str.splitlines(), not to the vocab loader: ids stay aligned with the model.
    assert vocab.tokens[343] == "\u2028" and vocab.tokens[13502] == "##\u2028"
    assert vocab.id("[CLS]") == 101 and vocab.id("[MASK]") == 103
    assert len(load_tokenizer(vocab_path()).vocab) == 21128


CHINESE_CASES = [
    ("他来了；我们走吧！好吗？", ["他来了；", "我们走吧！", "好吗？"]),
    # closing quotes and brackets stay with their sentence
    ("他说：“好。”然后走了。", ["他说：“好。”", "然后走了。"]),
    ("「走吧！」『是。』（完。）下一句", ["「走吧！」", "『是。』", "（完。）", "下一句"]),
    # punctuation that cannot open a sentence keeps it going
    ("“快跑！”，他喊道。“好！”、“对！”", ["“快跑！”，他喊道。", "“好！”、“对！”"]),
    ("真的吗？！是的……", ["真的吗？！", "是的……"]),
]


@pytest.mark.parametrize("text,expected", CHINESE_CASES, ids=[c[0][:12] for c in CHINESE_CASES])
def test_chinese_sentence_ends(text, expected):
    assert split_sentences(text) == expected
    assert_invariants(text, sentence_spans(text))


def test_segmentation_of_shared_chinese_paragraphs_keeps_every_character():
    path = shared_path("pretrain", "chinese", "zhwiki", "wiki_00")
    sentences = 0
    for d in read_documents(str(path), "wikiextractor", Counter()):
        for p in d.paragraphs:
            spans = sentence_spans(p)
            assert_invariants(p, spans)
            sentences += len(spans)
            for _, e in spans[:-1]:  # every cut but the paragraph's end follows a CJK or Latin end
                assert p[e - 1] in ".!?…。！？；”’」』）\"')]}›»", p[max(0, e - 10) : e + 10]
    assert sentences > 8_000


@pytest.fixture(scope="module")
def hf_chinese(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    import json
    import shutil

    d = tmp_path_factory.mktemp("hf_zh")
    shutil.copy(vocab_path(), d / "vocab.txt")
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))  # bert-base-chinese's own
    return transformers.BertTokenizerFast.from_pretrained(str(d))


def _sentence_ids(batch, i: int, s0: int, t0: int) -> tuple[list[list[int]], int, int]:
    out = []
    for n in batch.sentence_lengths[s0 : s0 + batch.doc_sentences[i]]:
        out.append(batch.ids[t0 : t0 + n].tolist())
        t0 += n
    return out, s0 + int(batch.doc_sentences[i]), t0


def _assert_same_ids(hf, docs, name: str) -> tuple[int, int]:
    """Ids of each sentence of ``docs`` equal BertTokenizerFast's; returns (sentences, tokens) compared."""
    assert len(hf) == 21128
    batch = DocumentTokenizer(load_tokenizer(vocab_path()))(docs, Counter())
    used = set(batch.doc_ids)
    kept = [(d, s) for d, s in docs if d in used]
    s0 = t0 = 0
    texts = tokens = 0
    for i, (_, sentences) in enumerate(kept):
        ours, s0, t0 = _sentence_ids(batch, i, s0, t0)
        theirs = [ids for ids in hf(sentences, add_special_tokens=False)["input_ids"] if ids]
        assert ours == theirs, f"{name}: document {i} differs"
        texts += len(sentences)
        tokens += sum(map(len, ours))
    # every sentence was compared (documents without tokens give none to compare)
    assert texts >= 0.99 * sum(len(s) for _, s in docs), (texts, sum(len(s) for _, s in docs))
    return texts, tokens


@pytest.mark.parametrize("name,fmt", CHINESE, ids=[n for n, _ in CHINESE])
def test_ids_identical_to_bert_tokenizer_fast_on_a_sample(name, fmt, hf_chinese):
    docs = chinese_docs(name, fmt)
    texts, tokens = _assert_same_ids(hf_chinese, docs[:: max(1, len(docs) // 40)], name)
    assert tokens > 5_000


@pytest.mark.slow
@pytest.mark.parametrize("name,fmt", CHINESE, ids=[n for n, _ in CHINESE])
def test_ids_identical_to_bert_tokenizer_fast_on_all_shared_chinese_text(name, fmt, hf_chinese):
    """All 1.4 M characters (~20 s): 64 + 222 articles, 2,500 + 2,500 CLUECorpusSmall documents."""
    texts, tokens = _assert_same_ids(hf_chinese, chinese_docs(name, fmt), name)
    assert tokens > 200_000


def test_word_marks_are_segmenter_words(hf_chinese):
    """A token is marked exactly when its first character is inside a word of the segmenter's (run here on
    each sentence alone, with Hugging Face's offsets) or it is a ## piece."""
    docs = chinese_docs("CLUECorpusSmall_bert_sampled.txt", "sentences")[:300]
    spec = load_tokenizer(vocab_path())
    batch = DocumentTokenizer(spec, "rjieba")(docs, Counter())
    ids, continues = unmark(batch.ids, len(spec.vocab))
    assert ids.max() < len(spec.vocab) and 0.3 < continues.mean() < 0.6
    plain = DocumentTokenizer(spec)(docs, Counter())
    assert np.array_equal(ids, plain.ids)  # marks come off exactly
    spans = load_segmenter("rjieba")
    is_piece = np.array([t.startswith("##") for t in spec.vocab.tokens])
    sentences = [s for _, ss in docs for s in ss]
    at = 0
    for s, enc in zip(
        sentences, hf_chinese(sentences, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    ):
        starts = {a for a, _ in spans(s)}
        expected = [a not in starts for a, _ in enc]
        n = len(expected)
        got = continues[at : at + n] & ~is_piece[ids[at : at + n]]
        assert got.tolist() == [e and not is_piece[t] for e, t in zip(expected, ids[at : at + n])], s
        at += n
    assert at == len(ids)


def _masked_instances(segmenter: str, docs, dupe: int = 2):
    spec = load_tokenizer(vocab_path())
    vocab = spec.vocab
    batch = DocumentTokenizer(spec, segmenter)(docs, Counter())
    keys = np.arange(1, len(batch.doc_ids) + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    pool = Pool.build(keys, batch.doc_sentences, batch.sentence_lengths, batch.ids)
    out = []
    for p in range(dupe):
        raw = unit_instances(pool, p, 0, pool.num_docs, 125, 0.1)
        ids, offsets, seg_a = assemble(pool, raw, vocab.id("[CLS]"), vocab.id("[SEP]"))
        mspec = masking_spec(vocab, MaskingSettings(0.15, 20, whole_word_mask=True), word_marks=True)
        out.append((ids, offsets, seg_a, mask(ids, offsets, seg_a, raw.instance_ids, mspec)))
    return vocab, out


@pytest.mark.parametrize("segmenter", ["rjieba", "jieba"])
def test_whole_word_masking_of_chinese(segmenter):
    pytest.importorskip(segmenter)
    # the pure-Python jieba is ~10x slower: fewer documents
    docs = chinese_docs("CLUECorpusSmall_bert_sampled.txt", "sentences")[: 1200 if segmenter == "rjieba" else 600]
    vocab, parts = _masked_instances(segmenter, docs)
    v = len(vocab)
    mask_id = vocab.id("[MASK]")
    words = partly = instances = preds = 0
    kinds = Counter()
    for marked, offsets, seg_a, m in parts:
        orig, continues = unmark(marked, v)
        assert m.ids.max() < v and m.labels.max() < v  # no mark reaches a shard
        lengths = np.diff(offsets)
        k = np.diff(m.pred_offsets)
        rule = num_to_predict(lengths, 0.15, 20)
        # The count rule: never more than num_to_predict; fewer only when the next word would overflow it.
        assert (k <= np.minimum(rule, lengths - 3)).all()
        assert (k == rule).mean() > 0.9
        # Words over the whole batch: a token that does not continue, or the first of a segment, starts one.
        row = np.repeat(np.arange(len(lengths)), lengths)
        pos = np.arange(len(orig)) - offsets[row]
        seg = seg_a.astype(np.int64)[row]
        first = (pos == 0) | (pos == 1) | (pos == seg - 1) | (pos == seg) | (pos == lengths[row] - 1)
        word = np.cumsum(~continues | first) - 1
        flat = offsets[np.repeat(np.arange(len(lengths)), k)] + m.positions
        chosen = np.zeros(len(orig), dtype=bool)
        chosen[flat] = True
        size, hit = np.bincount(word), np.bincount(word, weights=chosen)
        words += int((size > 1).sum())
        partly += int(((hit > 0) & (hit < size)).sum())
        assert np.array_equal(m.labels, orig[flat])
        new = m.ids[flat]
        kinds["mask"] += int((new == mask_id).sum())
        kinds["kept"] += int(((new == m.labels) & (m.labels != mask_id)).sum())
        kinds["random"] += int(((new != m.labels) & (new != mask_id)).sum())
        instances += len(lengths)
        preds += len(flat)
    assert partly == 0 and words > 10_000, (partly, words)
    assert instances > 2_000 and preds == sum(kinds.values())
    # 80/10/10, within 4 standard deviations of the binomial (a random draw may equal the label: rare)
    for kind, p in (("mask", 0.8), ("kept", 0.1), ("random", 0.1)):
        sd = (p * (1 - p) / preds) ** 0.5
        assert abs(kinds[kind] / preds - p) < 4 * sd + 1e-3, (kind, kinds[kind] / preds)


def test_word_marks_change_only_which_positions_are_masked():
    """Without marks, whole-word masking of Chinese is per character (no ## pieces): with them, far more
    predictions sit in runs of adjacent positions (words), and the ids outside the predictions are equal."""
    pytest.importorskip("rjieba")
    docs = chinese_docs("CLUECorpusSmall_bert_sampled.txt", "sentences")[:800]
    vocab, parts = _masked_instances("rjieba", docs, dupe=1)
    marked, offsets, seg_a, m = parts[0]
    orig, _ = unmark(marked, len(vocab))
    plain_spec = masking_spec(vocab, MaskingSettings(0.15, 20, whole_word_mask=True))
    iids = np.arange(len(seg_a), dtype=np.uint64)
    chars = mask(orig, offsets, seg_a, iids, plain_spec)
    runs = lambda x: float(np.mean(np.diff(x.positions.astype(np.int64)) == 1))  # noqa: E731
    assert runs(m) > runs(chars) + 0.2


def test_missing_segmenter_is_a_one_line_error(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from bertstream.pipelines.cli import main

    monkeypatch.setitem(sys.modules, "rjieba", None)  # import rjieba now raises ImportError
    with pytest.raises(SegmenterMissing, match="rjieba package"):
        load_segmenter("rjieba")
    text = tmp_path / "zh.txt"
    text.write_text("他来了。\n我们走吧！\n\n好吗？\n是的。\n", encoding="utf-8")
    args = ["pretraining", "--input", str(text), "--vocab", vocab_path(), "--output", str(tmp_path / "out")]
    result = CliRunner().invoke(main, [*args, "--whole-word-mask", "--word-segmenter", "rjieba"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and "rjieba package" in lines[0] and "--word-segmenter" in lines[0], result.output
    result = CliRunner().invoke(main, [*args, "--word-segmenter", "rjieba"])
    assert result.exit_code == 2 and "only applies with --whole-word-mask" in result.output


def test_pretraining_pipeline_with_a_word_segmenter_writes_schema_v1_shards(tmp_path):
    """The Beam pipeline end to end: marks never reach a shard, and masked positions come in word runs."""
    pytest.importorskip("rjieba")
    from dataclasses import replace

    import pyarrow as pa

    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.pretraining.pipeline import run_pretraining
    from bertstream.schemas.pretraining import INPUT_IDS, MASKED_LM_IDS, MASKED_LM_POSITIONS

    src = shared_path("pretrain", "chinese", "CLUECorpusSmall_bert_sampled.txt").read_text(encoding="utf-8")
    text = tmp_path / "clue.txt"
    text.write_text("\n\n".join(src.split("\n\n")[:400]) + "\n", encoding="utf-8")
    cfg = PretrainingConfig(input_format="sentences", dupe_factor=1, num_shards=1, whole_word_mask=True)
    runs = {}
    for segmenter in ("", "rjieba"):
        out = tmp_path / (segmenter or "plain")
        r = run_pretraining(
            PretrainingJob(
                inputs=tuple([str(text)]),
                vocab=vocab_path(),
                output=str(out),
                config=replace(cfg, word_segmenter=segmenter),
            )
        )
        assert r.manifest.schema_version == 1
        shard = out / r.manifest.shards[0].path
        runs[segmenter] = (r.manifest, pa.ipc.open_file(pa.memory_map(str(shard))).read_all().to_pydict())
    (plain_m, plain), (wwm_m, wwm) = runs[""], runs["rjieba"]
    assert wwm_m.parameters["word_segmenter"] == "rjieba" and plain_m.parameters["word_segmenter"] == ""
    ids = [i for row in wwm[INPUT_IDS] for i in row] + [i for row in wwm[MASKED_LM_IDS] for i in row]
    assert max(ids) < 21128

    # the same instances (the segmenter changes only the masks): unmasked, they are the plain run's tokens
    def restored(t):
        rows = []
        for row, pos, lab in zip(t[INPUT_IDS], t[MASKED_LM_POSITIONS], t[MASKED_LM_IDS]):
            row = list(row)
            for p, label in zip(pos, lab):
                row[p] = label
            rows.append(row)
        return sorted(rows)

    assert restored(wwm) == restored(plain)
    runs_of = lambda t: np.mean([np.mean(np.diff(p) == 1) for p in t[MASKED_LM_POSITIONS] if len(p) > 1])  # noqa: E731
    assert runs_of(wwm) > runs_of(plain) + 0.2
