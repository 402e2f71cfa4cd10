from __future__ import annotations

import numpy as np
import pytest

from bertstream.pipelines.pretraining.masking import mask, masking_spec
from bertstream.schemas.pretraining import num_to_predict
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab, is_reserved

CLS, SEP, MASK_ID = 2, 3, 4


def toy_vocab(n: int = 3000) -> Vocab:
    words = [f"w{i}" if i % 4 else f"##p{i}" for i in range(n)]
    return Vocab(tuple(SPECIAL_TOKENS) + tuple(f"[unused{i}]" for i in range(20)) + tuple(words))


def random_batch(rng: np.random.Generator, n: int, vocab: Vocab, max_len: int = 128):
    lengths = rng.integers(5, max_len + 1, size=n)
    seg_a = np.array([rng.integers(2, L - 2) + 1 for L in lengths], dtype=np.int16)  # [CLS] + >=1 + [SEP]
    ids = []
    for L, a in zip(lengths, seg_a):
        body = rng.integers(25, len(vocab), size=L)
        body[0], body[a - 1], body[L - 1] = CLS, SEP, SEP
        ids.append(body)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return np.concatenate(ids).astype(np.uint16), offsets, seg_a, rng.integers(0, 2**63, size=n, dtype=np.uint64)


@pytest.fixture(scope="module")
def vocab():
    return toy_vocab()


@pytest.fixture(scope="module")
def spec(vocab):
    return masking_spec(vocab, 0.15, 20, whole_word=False)


def test_count_rule_rounds_half_to_even_like_python():
    lengths = np.arange(5, 600)
    expected = [min(20, max(1, int(round(L * 0.15)))) for L in lengths]
    assert num_to_predict(lengths, 0.15, 20).tolist() == expected
    assert num_to_predict(np.array([30]), 0.15, 20)[0] == round(30 * 0.15)  # 4.5 -> 4


def test_masks_follow_the_rule_and_80_10_10(spec, vocab):
    rng = np.random.default_rng(0)
    ids, offsets, seg_a, iids = random_batch(rng, 20000, vocab)
    m = mask(ids, offsets, seg_a, iids, spec)
    lengths = np.diff(offsets)
    k = np.diff(m.pred_offsets)
    assert np.array_equal(k, num_to_predict(lengths, 0.15, 20))  # 100% of instances
    row = np.repeat(np.arange(len(lengths)), k)
    flat = offsets[row] + m.positions
    # Never [CLS] or [SEP]; labels are the originals; positions ascending and unique within each instance.
    assert not np.isin(ids[flat], [CLS, SEP]).any()
    assert np.array_equal(m.labels, ids[flat])
    assert (m.positions < lengths[row]).all()
    same_row = row[1:] == row[:-1]
    assert (np.diff(m.positions.astype(np.int64))[same_row] > 0).all()
    # Untouched positions keep their ids.
    untouched = np.ones(len(ids), bool)
    untouched[flat] = False
    assert np.array_equal(m.ids[untouched], ids[untouched])
    new = m.ids[flat]
    is_mask = new == MASK_ID
    kept = ~is_mask & (new == m.labels)
    rand = ~is_mask & ~kept
    n = len(flat)
    assert n > 150_000  # 0.005 is over 7 standard deviations of each fraction
    assert abs(is_mask.mean() - 0.8) < 0.005 and abs(kept.mean() - 0.1) < 0.005 and abs(rand.mean() - 0.1) < 0.005
    # Random replacements never draw special or [unused*] tokens (the reference could insert [CLS] or [PAD]).
    assert not any(is_reserved(vocab.tokens[t]) for t in np.unique(new[rand]))
    assert len(np.unique(new[rand])) > 1000  # spread over the vocabulary


def test_an_instance_masks_the_same_whatever_its_batch(spec, vocab):
    rng = np.random.default_rng(1)
    ids, offsets, seg_a, iids = random_batch(rng, 300, vocab)
    whole = mask(ids, offsets, seg_a, iids, spec)
    for i in (0, 17, 299):
        one = mask(
            ids[offsets[i] : offsets[i + 1]], offsets[i : i + 2] - offsets[i], seg_a[i : i + 1], iids[i : i + 1], spec
        )
        assert np.array_equal(one.ids, whole.ids[offsets[i] : offsets[i + 1]])
        assert np.array_equal(one.positions, whole.positions[whole.pred_offsets[i] : whole.pred_offsets[i + 1]])


def test_whole_word_masking_masks_whole_words(vocab):
    spec = masking_spec(vocab, 0.15, 20, whole_word=True)
    rng = np.random.default_rng(2)
    ids, offsets, seg_a, iids = random_batch(rng, 2000, vocab)
    m = mask(ids, offsets, seg_a, iids, spec)
    lengths = np.diff(offsets)
    k = np.diff(m.pred_offsets)
    rule = num_to_predict(lengths, 0.15, 20)
    assert (k <= rule).all() and k.mean() > 0.9 * rule.mean()  # words that overflow are skipped, rarely
    cont = spec.is_continuation
    for i in range(200):
        toks = ids[offsets[i] : offsets[i + 1]]
        chosen = set(m.positions[m.pred_offsets[i] : m.pred_offsets[i + 1]].tolist())
        for p in chosen:
            # A masked continuation piece implies its predecessor in the same segment is masked too, and a masked
            # word start implies its continuation pieces are masked.
            if cont[toks[p]] and toks[p - 1] not in (CLS, SEP):
                assert p - 1 in chosen
            if p + 1 < len(toks) and cont[toks[p + 1]]:
                assert p + 1 in chosen


def test_masking_spec_refuses_a_vocabulary_of_specials_only():
    with pytest.raises(ValueError, match="no ordinary tokens"):
        masking_spec(Vocab(tuple(SPECIAL_TOKENS)), 0.15, 20, False)
