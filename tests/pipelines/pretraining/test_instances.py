from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from bertstream.pipelines.inputs.read import read_documents
from bertstream.pipelines.pretraining.instances import (
    Pool,
    RawInstances,
    assemble,
    document_instances,
    document_key,
    unit_instances,
)
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer.load import load_tokenizer
from tests.pipelines import reference_bert as ref


@pytest.fixture(scope="module")
def pool_and_vocab(demo_corpus, demo_vocab):
    """A real pool: the pydoc corpus, segmented and tokenized, ordered by seeded document key."""
    from bertstream.pipelines.inputs.read import DocumentBatch
    from bertstream.pipelines.pretraining.segment import segment_documents

    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    docs = []
    for path in sorted(demo_corpus.glob("*.txt")):
        docs.extend(read_documents(str(path), "text", Counter()))
    sentences, _ = segment_documents(DocumentBatch(docs))
    batch = DocumentTokenizer(spec)(sentences, Counter())
    keys = [document_key(7, d) for d in batch.doc_ids]
    return Pool.build(
        np.asarray(keys, dtype=np.uint64), batch.doc_sentences, batch.sentence_lengths, batch.ids
    ), spec.vocab


def pool_documents(pool: Pool) -> list[list[list[int]]]:
    """The pool as the reference sees documents: lists of sentences of token ids."""
    docs = []
    for d in range(pool.num_docs):
        docs.append(
            [
                pool.ids[pool.sent_tok[s] : pool.sent_tok[s + 1]].tolist()
                for s in range(pool.doc_sent[d], pool.doc_sent[d + 1])
            ]
        )
    return docs


@pytest.mark.parametrize("max_seq_length,short_seq_prob", [(128, 0.1), (64, 0.5), (512, 0.1), (16, 0.0)])
def test_pairs_identical_to_reference_given_the_same_random_stream(pool_and_vocab, max_seq_length, short_seq_prob):
    pool, vocab = pool_and_vocab
    docs = pool_documents(pool)
    doc_sent, sent_tok = pool.doc_sent.tolist(), pool.sent_tok.tolist()
    cls, sep = vocab.id("[CLS]"), vocab.id("[SEP]")
    checked = 0
    for d in range(pool.num_docs):
        seed = 1000 * d + max_seq_length
        ours = document_instances(d, random.Random(seed), doc_sent, sent_tok, max_seq_length - 3, short_seq_prob)
        theirs = ref.create_instances_from_document(
            docs,
            d,
            max_seq_length,
            short_seq_prob,
            0.15,
            20,
            [],
            random.Random(seed),
            cls,
            sep,
            vocab.id("[MASK]"),
            with_masking=False,
        )
        assert len(ours) == len(theirs), f"document {d}"
        raw = RawInstances(
            np.zeros(len(ours), np.uint64),
            np.asarray([o[:4] for o in ours], np.int64).reshape(-1, 4),
            np.asarray([o[4] for o in ours], np.int8),
        )
        ids, offsets, seg_a = assemble(pool, raw, cls, sep)
        for k, t in enumerate(theirs):
            assert ids[offsets[k] : offsets[k + 1]].tolist() == t["tokens"]
            assert seg_a[k] == t["segment_a_length"]
            assert bool(raw.is_random_next[k]) == t["is_random_next"]
        checked += len(ours)
    assert checked > 300


def test_instance_invariants(pool_and_vocab):
    pool, vocab = pool_and_vocab
    raw = unit_instances(pool, 0, 0, pool.num_docs, 125, 0.1)
    a0, a1, b0, b1 = raw.spans.T
    assert ((a1 - a0) >= 1).all() and ((b1 - b0) >= 1).all()
    assert ((a1 - a0) + (b1 - b0) <= 125).all()
    # IsNext: B follows A in the same document; it starts at a sentence boundary unless truncated from the front.
    nxt = raw.is_random_next == 0
    assert (b0[nxt] >= a1[nxt]).all()
    assert len(np.unique(raw.instance_ids)) == len(raw.instance_ids)


def test_units_split_anywhere_give_the_same_instances(pool_and_vocab):
    pool, _ = pool_and_vocab
    whole = unit_instances(pool, 3, 0, pool.num_docs, 125, 0.1)
    cut = pool.num_docs // 3
    parts = [unit_instances(pool, 3, a, b, 125, 0.1) for a, b in ((0, cut), (cut, 2 * cut), (2 * cut, pool.num_docs))]
    assert np.array_equal(np.concatenate([p.instance_ids for p in parts]), whole.instance_ids)
    assert np.array_equal(np.concatenate([p.spans for p in parts]), whole.spans)
    other_pass = unit_instances(pool, 4, 0, pool.num_docs, 125, 0.1)
    assert not set(other_pass.instance_ids.tolist()) & set(whole.instance_ids.tolist())


def test_pool_is_ordered_by_key_whatever_the_input_order(pool_and_vocab):
    pool, _ = pool_and_vocab
    assert (np.diff(pool.doc_keys.astype(np.float64)) > 0).all()
    rev = np.arange(pool.num_docs)[::-1]
    doc_sents = np.diff(pool.doc_sent)
    sent_lens = np.diff(pool.sent_tok)
    # Rebuild from documents in reverse order: the same pool.
    ids, lens = [], []
    for d in rev:
        ids.append(pool.ids[pool.sent_tok[pool.doc_sent[d]] : pool.sent_tok[pool.doc_sent[d + 1]]])
        lens.append(sent_lens[pool.doc_sent[d] : pool.doc_sent[d + 1]])
    again = Pool.build(pool.doc_keys[rev], doc_sents[rev], np.concatenate(lens), np.concatenate(ids))
    for field in ("doc_keys", "doc_sent", "sent_tok", "ids"):
        assert np.array_equal(getattr(again, field), getattr(pool, field))
    back = Pool.from_bytes(pool.to_bytes())
    assert np.array_equal(back.ids, pool.ids) and np.array_equal(back.doc_sent, pool.doc_sent)


def test_duplicate_document_keys_are_refused():
    with pytest.raises(ValueError, match="share a 64-bit key"):
        Pool.build(np.array([5, 5], np.uint64), np.array([1, 1]), np.array([2, 2]), np.arange(4, dtype=np.uint16))
