"""The masking rule: the count, the candidates, 80/10/10, whole words, and masks that depend on the key alone."""

from __future__ import annotations

import numpy as np
import pytest

from bertstream.schemas import masking as M
from bertstream.schemas.masking import MaskingRule, MaskingSettings, num_to_predict
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab, is_reserved

CLS, SEP, MASK_ID = 2, 3, 4


def toy_vocab(n: int = 3000) -> Vocab:
    words = [f"w{i}" if i % 4 else f"##p{i}" for i in range(n)]
    return Vocab(tuple(SPECIAL_TOKENS) + tuple(f"[unused{i}]" for i in range(20)) + tuple(words))


def random_batch(rng: np.random.Generator, n: int, vocab: Vocab, max_len: int = 128):
    """``(ids, offsets, seg_a, keys)`` of ``n`` random instances laid out ragged, as the pipeline holds them."""
    lengths = rng.integers(5, max_len + 1, size=n)
    seg_a = np.array([rng.integers(2, L - 2) + 1 for L in lengths], dtype=np.int16)  # [CLS] + >=1 + [SEP]
    ids = []
    for L, a in zip(lengths, seg_a):
        body = rng.integers(25, len(vocab), size=L)
        body[0], body[a - 1], body[L - 1] = CLS, SEP, SEP
        ids.append(body)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return np.concatenate(ids).astype(np.uint16), offsets, seg_a, rng.integers(0, 2**63, size=n, dtype=np.uint64)


def padded(ids: np.ndarray, offsets: np.ndarray, width: int | None = None, pad: int = 0) -> np.ndarray:
    """[N, width] rows of a ragged layout, padded with ``pad``."""
    lengths = np.diff(offsets)
    valid = np.arange(width or int(lengths.max()))[None, :] < lengths[:, None]
    out = np.full(valid.shape, pad, ids.dtype)
    out[valid] = ids
    return out


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return toy_vocab()


def test_count_rule_rounds_half_to_even_like_python():
    lengths = np.arange(5, 600)
    expected = [min(20, max(1, int(round(L * 0.15)))) for L in lengths]
    assert num_to_predict(lengths, 0.15, 20).tolist() == expected
    assert num_to_predict(np.array([30]), 0.15, 20)[0] == round(30 * 0.15)  # 4.5 -> 4
    lengths = np.arange(3, 513)
    for p, cap in ((0.15, 20), (0.30, 77), (0.15, None)):
        want = np.minimum(num_to_predict(lengths, p, cap or 10**9), lengths - 3)
        np.testing.assert_array_equal(num_to_predict(lengths, p, cap, within_candidates=True), want)


def test_the_80_10_10_constants():
    assert (M.MASK_FRACTION, M.KEEP_FRACTION, M.RANDOM_FRACTION) == (0.8, 0.1, 0.1)
    assert M.KEEP_OF_REST == 0.5  # exactly: the threshold the shards were written with


def test_the_split_is_a_setting_of_the_one_settings_object(vocab):
    assert MaskingSettings().keep_of_rest == M.KEEP_OF_REST  # the default split is the constants'
    ids, offsets, seg_a, keys = random_batch(np.random.default_rng(1), 20000, vocab)
    original = padded(ids, offsets)
    settings = MaskingSettings(0.15, 20, mask_fraction=0.5, keep_fraction=0.5, random_fraction=0.0)
    m = M.mask(original, np.diff(offsets), seg_a, keys, MaskingRule.for_vocab(vocab, settings))
    became = m.input_ids[m.rows, m.positions]
    assert abs(np.mean(became == vocab.id("[MASK]")) - 0.5) < 0.03  # ~2,000 predictions
    assert np.all((became == vocab.id("[MASK]")) | (became == m.labels))  # no random token drawn
    for bad, name in (({"mask_fraction": 0.7}, "mask_fraction"), ({"keep_fraction": -0.1}, "keep_fraction")):
        with pytest.raises(M.SettingError, match=f"^{name}: "):
            MaskingSettings(**bad)


def test_masks_follow_the_rule_and_80_10_10(vocab):
    rule = MaskingRule.for_vocab(vocab, MaskingSettings(0.15, 20))
    ids, offsets, seg_a, keys = random_batch(np.random.default_rng(0), 20000, vocab)
    lengths = np.diff(offsets)
    original = padded(ids, offsets)
    m = M.mask(original, lengths, seg_a, keys, rule)
    assert np.array_equal(np.bincount(m.rows, minlength=len(lengths)), num_to_predict(lengths, 0.15, 20))
    # Never [CLS] or [SEP], never padding; labels are the originals; positions ascending within each row.
    assert not np.isin(m.labels, [CLS, SEP]).any() and (m.positions < lengths[m.rows]).all()
    assert np.array_equal(m.labels, original[m.rows, m.positions])
    same_row = m.rows[1:] == m.rows[:-1]
    assert (np.diff(m.positions)[same_row] > 0).all()
    untouched = np.ones(original.shape, bool)
    untouched[m.rows, m.positions] = False
    assert np.array_equal(m.input_ids[untouched], original[untouched])
    new = m.input_ids[m.rows, m.positions]
    is_mask = new == MASK_ID
    kept = ~is_mask & (new == m.labels)
    rand = ~is_mask & ~kept
    assert len(new) > 150_000  # 0.005 is over 7 standard deviations of each fraction
    assert abs(is_mask.mean() - 0.8) < 0.005 and abs(kept.mean() - 0.1) < 0.005 and abs(rand.mean() - 0.1) < 0.005
    # Random replacements never draw special or [unused*] tokens (the reference could insert [CLS] or [PAD]).
    assert not any(is_reserved(vocab.tokens[t]) for t in np.unique(new[rand]))
    assert len(np.unique(new[rand])) > 1000  # spread over the vocabulary


@pytest.mark.parametrize("whole_word", [False, True])
def test_a_row_masks_the_same_whatever_its_batch_and_padding(vocab, whole_word):
    rule = MaskingRule.for_vocab(vocab, MaskingSettings(0.15, 20, whole_word))
    ids, offsets, seg_a, keys = random_batch(np.random.default_rng(1), 300, vocab)
    lengths = np.diff(offsets)
    whole = M.mask(padded(ids, offsets), lengths, seg_a, keys, rule)
    for i in (0, 17, 299):
        alone = ids[offsets[i] : offsets[i + 1]], offsets[i : i + 2] - offsets[i]
        row = lengths[i : i + 1], seg_a[i : i + 1]
        one = M.mask(padded(*alone, width=200, pad=7), *row, keys[i : i + 1], rule)  # wider, other padding
        assert np.array_equal(one.positions, whole.positions[whole.rows == i])
        assert np.array_equal(one.input_ids[0, : lengths[i]], whole.input_ids[i, : lengths[i]])
        other_key = M.mask(padded(*alone), *row, keys[i : i + 1] + np.uint64(1), rule)
        assert not np.array_equal(other_key.input_ids[0], one.input_ids[0, : lengths[i]])


def greedy_words(key: np.ndarray, candidate: np.ndarray, continues: np.ndarray, k: int) -> np.ndarray:
    """Google's whole-word choice for one row, one word at a time: words (a candidate and the candidates right
    after it that continue it) in the order of their first piece's key, each taken if it still fits in ``k``."""
    words: list[list[int]] = []
    for p in np.flatnonzero(candidate).tolist():
        if continues[p] and candidate[p - 1] and words:
            words[-1].append(p)
        else:
            words.append([p])
    chosen = np.zeros(len(key), bool)
    taken = 0
    for w in sorted(words, key=lambda w: int(key[w[0]])):
        if taken + len(w) <= k:
            chosen[w] = True
            taken += len(w)
    return chosen


def test_whole_words_are_chosen_as_one_word_at_a_time_would(vocab):
    rule = MaskingRule.for_vocab(vocab, MaskingSettings(0.15, 20, whole_word_mask=True))
    ids, offsets, seg_a, keys = random_batch(np.random.default_rng(2), 400, vocab, max_len=300)
    lengths = np.diff(offsets)
    original = padded(ids, offsets)
    m = M.mask(original, lengths, seg_a, keys, rule)
    k = num_to_predict(lengths, 0.15, 20, within_candidates=True)
    assert (np.bincount(m.rows, minlength=len(k)) <= k).all()
    pos = np.arange(original.shape[1])
    multi = 0
    for i in range(len(lengths)):
        candidate = (pos < lengths[i]) & (pos != 0) & (pos != seg_a[i] - 1) & (pos != lengths[i] - 1)
        key = M.draw_bits(keys[i : i + 1], pos, M.PICK)
        want = greedy_words(key, candidate, rule.is_continuation[original[i]], int(k[i]))
        assert np.array_equal(m.positions[m.rows == i], np.flatnonzero(want)), i
        multi += int((want[1:] & want[:-1] & rule.is_continuation[original[i, 1:]]).sum())
    assert multi > 200  # words of several pieces were chosen


def test_a_caller_may_supply_its_own_word_boundaries(vocab):
    # Every token continues its word (as a segmenter's marks may say): a row is then two words, A and B.
    rule = MaskingRule.for_vocab(vocab, MaskingSettings(0.5, None, whole_word_mask=True))
    original = np.array([[CLS, 30, 31, 32, SEP, 40, 41, 42, 43, SEP]])
    m = M.mask(original, np.array([10]), np.array([5]), np.array([9], np.uint64), rule, np.ones((1, 10), bool))
    assert m.positions.tolist() in ([1, 2, 3], [5, 6, 7, 8])  # k = 5: the word that fits, the other skipped


def test_a_vocabulary_of_specials_only_is_refused():
    with pytest.raises(ValueError, match="no ordinary tokens"):
        MaskingRule.for_vocab(Vocab(tuple(SPECIAL_TOKENS)), MaskingSettings(0.15, 20))
