"""The compiled instance kernel against the pure-Python path it transcribes, instance for instance."""

from __future__ import annotations

import numpy as np
import pytest

from bertstream.pipelines.pretraining.instances import (
    Pool,
    RawInstances,
    assemble,
    reference_assemble,
    reference_unit_instances,
    unit_instances,
)

# (max_seq_length, short_seq_prob, pass): the default, heavy short-target use, long and tiny sequences (the
# truncation loop runs long), and every document drawing a short target.
SETTINGS = [(128, 0.1, 0), (64, 0.5, 3), (512, 0.1, 1), (16, 0.0, 2), (128, 1.0, 9)]


def assert_same(ours: RawInstances, theirs: RawInstances) -> None:
    assert ours.instance_ids.dtype == np.uint64 and ours.is_random_next.dtype == np.int8
    assert np.array_equal(ours.instance_ids, theirs.instance_ids)
    assert np.array_equal(ours.spans, theirs.spans)
    assert np.array_equal(ours.is_random_next, theirs.is_random_next)


def check_pool(pool: Pool, max_seq_length: int, short_seq_prob: float, pass_index: int) -> RawInstances:
    args = (pass_index, 0, pool.num_docs, max_seq_length - 3, short_seq_prob)
    ours = unit_instances(pool, *args)
    assert_same(ours, reference_unit_instances(pool, *args))
    return ours


@pytest.mark.parametrize("max_seq_length,short_seq_prob,pass_index", SETTINGS)
def test_kernel_equals_python_on_wikipedia_and_books(wiki_books_pool, max_seq_length, short_seq_prob, pass_index):
    pool, _ = wiki_books_pool
    sentences = np.diff(pool.doc_sent)
    assert (sentences == 1).sum() >= 3 and sentences.max() > 2000  # one-sentence articles and whole novels
    raw = check_pool(pool, max_seq_length, short_seq_prob, pass_index)
    assert len(raw.instance_ids) > 1000 and 0 < raw.is_random_next.mean() < 1


@pytest.mark.parametrize("max_seq_length,short_seq_prob,pass_index", SETTINGS)
def test_kernel_equals_python_on_the_demo_corpus(demo_pool, max_seq_length, short_seq_prob, pass_index):
    check_pool(demo_pool[0], max_seq_length, short_seq_prob, pass_index)


def test_pools_of_one_and_two_documents(wiki_books_pool):
    # One document: every random-next draw is randint(0, 0) ten times over (each still consumes draws).
    pool, _ = wiki_books_pool
    sentences = np.diff(pool.doc_sent)
    for docs in (
        [int(np.argmax(sentences))],
        [int(np.argmax(sentences == 1))],
        [int(np.argmax(sentences == 1)), int(np.argmax(sentences))],
    ):
        sub = sub_pool(pool, docs)
        for setting in SETTINGS[:3]:
            check_pool(sub, *setting)


def test_units_split_anywhere_and_loaded_pools_give_the_same(wiki_books_pool):
    pool, _ = wiki_books_pool
    whole = unit_instances(pool, 4, 0, pool.num_docs, 125, 0.1)
    cuts = [0, 1, 2, 57, pool.num_docs - 3, pool.num_docs]
    parts = [unit_instances(pool, 4, a, b, 125, 0.1) for a, b in zip(cuts, cuts[1:])]
    assert_same(
        RawInstances(
            np.concatenate([p.instance_ids for p in parts]),
            np.concatenate([p.spans for p in parts]),
            np.concatenate([p.is_random_next for p in parts]),
        ),
        whole,
    )
    assert len(unit_instances(pool, 4, 5, 5, 125, 0.1).instance_ids) == 0
    loaded = Pool.from_bytes(pool.to_bytes())  # read-only arrays, as workers see them
    assert_same(unit_instances(loaded, 4, 0, pool.num_docs, 125, 0.1), whole)


def test_assemble_kernel_equals_numpy(wiki_books_pool):
    pool, vocab = wiki_books_pool
    cls, sep = vocab.id("[CLS]"), vocab.id("[SEP]")
    wide = Pool(pool.doc_keys, pool.doc_sent, pool.sent_tok, pool.ids.astype(np.int32))  # vocabularies over 65,536
    for p in (pool, wide, Pool.from_bytes(pool.to_bytes())):
        raw = unit_instances(p, 0, 0, p.num_docs, 125, 0.1)
        ours, theirs = assemble(p, raw, cls, sep), reference_assemble(p, raw, cls, sep)
        for a, b in zip(ours, theirs):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert ours[0].dtype == p.ids.dtype
    empty = RawInstances(np.zeros(0, np.uint64), np.zeros((0, 4), np.int64), np.zeros(0, np.int8))
    ids, offsets, seg_a = assemble(pool, empty, cls, sep)
    assert len(ids) == 0 and offsets.tolist() == [0] and len(seg_a) == 0


def test_an_empty_document_drawn_for_random_next_fails_as_in_python():
    # Document 0 has one sentence, so B comes from another document: the only other one is empty.
    pool = Pool.build(np.array([1, 2], np.uint64), np.array([1, 0]), np.array([3]), np.arange(3, dtype=np.uint16))
    with pytest.raises(ValueError, match="empty range"):
        reference_unit_instances(pool, 0, 0, 2, 125, 0.1)
    with pytest.raises(ValueError, match="empty range"):
        unit_instances(pool, 0, 0, 2, 125, 0.1)


def test_bounds_are_checked_before_the_kernel(demo_pool):
    pool, _ = demo_pool
    with pytest.raises(IndexError):
        unit_instances(pool, 0, 0, pool.num_docs + 1, 125, 0.1)
    bad = RawInstances(np.zeros(1, np.uint64), np.array([[0, 5, 5, len(pool.ids) + 1]]), np.zeros(1, np.int8))
    with pytest.raises(IndexError):
        assemble(pool, bad, 2, 3)
    data = bytearray(pool.to_bytes())
    data[-len(pool.ids.tobytes()) - 8 : -len(pool.ids.tobytes())] = (10**9).to_bytes(8, "little")  # last sent_tok
    with pytest.raises(ValueError, match="corrupt document pool"):
        Pool.from_bytes(bytes(data))


def sub_pool(pool: Pool, docs: list[int]) -> Pool:
    ids, lens = [], []
    for d in docs:
        s0, s1 = pool.doc_sent[d], pool.doc_sent[d + 1]
        ids.append(pool.ids[pool.sent_tok[s0] : pool.sent_tok[s1]])
        lens.append(np.diff(pool.sent_tok[s0 : s1 + 1]))
    return Pool.build(pool.doc_keys[docs], np.diff(pool.doc_sent)[docs], np.concatenate(lens), np.concatenate(ids))
