"""Dynamic re-masking: originals rebuilt exactly, masks fresh per epoch yet reproducible, BERT's statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertstream.schemas import masking as rule
from bertstream.schemas.masking import MaskingSettings, num_to_predict
from bertstream.schemas.vocab import MASK, Vocab, is_reserved
from bertstream.trainer.data import DataConfig, PretrainingLoader
from bertstream.trainer.data.masking import Masker, instance_keys, restore
from tests.trainer.data.conftest import Dataset, uint64

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def make(path: Path, **kw: object) -> PretrainingLoader:
    kw = {"batch_size": 8, "shuffle_buffer": 64, "seed": 5, "masking": "dynamic", **kw}
    return PretrainingLoader(DataConfig(paths=(str(path),), **kw), expected_vocab_sha256=None)  # type: ignore[arg-type]


def rows(loader: PretrainingLoader) -> dict[int, dict[str, np.ndarray]]:
    """One epoch by instance id: the masked ids, the prediction positions and labels, the original."""
    out = {}
    for b in loader:
        n = b["attention_mask"].sum(1).numpy()
        k = b["masked_lm_weights"].sum(1).numpy().astype(int)
        original = restore(
            b["input_ids"].numpy(),
            b["masked_lm_positions"].numpy(),
            b["masked_lm_ids"].numpy(),
            b["masked_lm_weights"].numpy() != 0,
        )
        for i, iid in enumerate(b["instance_ids"].tolist()):
            out[uint64(iid)] = {
                "ids": b["input_ids"][i, : n[i]].numpy(),
                "positions": b["masked_lm_positions"][i, : k[i]].numpy(),
                "labels": b["masked_lm_ids"][i, : k[i]].numpy(),
                "original": original[i, : n[i]],
                "seg_a": int(n[i] - b["token_type_ids"][i].sum()),
            }
    return out


def demo_vocab_of(path: Path) -> Vocab:
    return Vocab.load(path / "vocab.txt")


def test_the_original_sequence_is_rebuilt_exactly(uneven: Dataset) -> None:
    got = rows(make(uneven.path, format="webdataset"))
    inst, by_id = uneven.instances, uneven.instances.by_id()
    assert got
    for iid, r in got.items():
        row = inst.row(by_id[iid])
        original = row["input_ids"].astype(np.int64).copy()
        original[row["masked_lm_positions"].astype(np.int64)] = row["masked_lm_ids"]
        np.testing.assert_array_equal(r["original"], original)
        np.testing.assert_array_equal(r["labels"], original[r["positions"]])
        untouched = np.setdiff1d(np.arange(len(original)), r["positions"])
        np.testing.assert_array_equal(r["ids"][untouched], original[untouched])


def test_masks_differ_across_epochs_and_seeds_and_repeat_on_rerun(demo_shards: Path) -> None:
    first, again, other_seed = make(demo_shards), make(demo_shards), make(demo_shards, seed=6)
    e0, e0_again, seed6 = rows(first), rows(again), rows(other_seed)
    e1 = rows(first)  # the loader moved on to epoch 1
    assert first.epoch == 2
    common = sorted(set(e0) & set(e1) & set(seed6))
    assert len(common) > 100
    for iid in e0:
        np.testing.assert_array_equal(e0[iid]["ids"], e0_again[iid]["ids"])
        np.testing.assert_array_equal(e0[iid]["positions"], e0_again[iid]["positions"])

    def share_differing(a: dict, b: dict) -> float:
        return np.mean([not np.array_equal(a[i]["positions"], b[i]["positions"]) for i in common])

    assert share_differing(e0, e1) > 0.95
    assert share_differing(e0, seed6) > 0.95
    for iid in common:  # the same original under every mask
        np.testing.assert_array_equal(e0[iid]["original"], e1[iid]["original"])


def test_masks_do_not_depend_on_workers_or_batch_size(demo_shards: Path) -> None:
    base = rows(make(demo_shards))
    other = rows(make(demo_shards, num_workers=2, batch_size=5, length_bucketing=True, bucket_batches=4))
    common = set(base) & set(other)
    assert len(common) > 100
    for iid in common:
        np.testing.assert_array_equal(base[iid]["ids"], other[iid]["ids"])
        np.testing.assert_array_equal(base[iid]["positions"], other[iid]["positions"])


def test_mid_epoch_resume_gives_the_same_batches(demo_shards: Path) -> None:
    whole = [dict(b) for b in make(demo_shards, num_workers=2)]
    partial = make(demo_shards, num_workers=2)
    it = iter(partial)
    for _ in range(3):
        next(it)
    state = partial.state_dict()
    del it
    resumed = make(demo_shards, num_workers=2)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(whole) - 3 > 0
    for a, b in zip(whole[3:], rest):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].shape == b[key].shape and bool((a[key] == b[key]).all()), key


@pytest.mark.parametrize(("probability", "max_predictions"), [(0.15, None), (0.30, 25)])
def test_count_rule_positions_and_80_10_10(demo_shards: Path, probability: float, max_predictions: int | None) -> None:
    vocab = demo_vocab_of(demo_shards)
    loader = make(demo_shards, mlm_probability=probability, max_predictions=max_predictions)
    got = {**rows(loader), **{-1 - k: v for k, v in rows(loader).items()}}  # two epochs
    outcome = {"mask": 0, "keep": 0, "random": 0}
    for r in got.values():
        n = len(r["original"])
        expected = min(max(1, round(n * probability)), max_predictions or n, n - 3)  # Python's round
        assert len(r["positions"]) == expected
        assert list(r["positions"]) == sorted(set(r["positions"]))
        assert not {0, r["seg_a"] - 1, n - 1} & set(r["positions"].tolist())  # never [CLS] or a [SEP]
        new = r["ids"][r["positions"]]
        is_mask = new == vocab.id(MASK)
        kept = ~is_mask & (new == r["labels"])
        outcome["mask"] += int(is_mask.sum())
        outcome["keep"] += int(kept.sum())
        outcome["random"] += int((~is_mask & ~kept).sum())
        assert not any(is_reserved(vocab.tokens[t]) for t in new[~is_mask & ~kept])
    total = sum(outcome.values())
    assert total > 5000
    # Binomial standard errors here are < 0.006: 0.02 is over three of them.
    assert abs(outcome["mask"] / total - 0.8) < 0.02
    assert abs(outcome["keep"] / total - 0.1) < 0.02  # (a random draw equal to the original counts as kept)
    assert abs(outcome["random"] / total - 0.1) < 0.02


def test_whole_word_masking_masks_whole_words(demo_shards: Path) -> None:
    vocab = demo_vocab_of(demo_shards)
    cont = np.asarray([t.startswith("##") for t in vocab.tokens])
    got = rows(make(demo_shards, whole_word_mask=True))
    pieces = counted = predicted = 0
    for r in got.values():
        n, seg_a, orig = len(r["original"]), r["seg_a"], r["original"]
        candidate = np.ones(n, bool)
        candidate[[0, seg_a - 1, n - 1]] = False
        chosen = np.zeros(n, bool)
        chosen[r["positions"]] = True
        joined = cont[orig[1:]] & candidate[1:] & candidate[:-1]  # position p+1 continues the word at p
        # A word is chosen whole: a continuation and the piece before it are chosen together.
        np.testing.assert_array_equal(chosen[1:][joined], chosen[:-1][joined])
        k = int(num_to_predict(np.array([n]), 0.15, None, within_candidates=True)[0])
        assert len(r["positions"]) <= k
        pieces += int(chosen[1:][joined].sum())
        counted += k
        predicted += len(r["positions"])
    assert pieces > 100  # the test saw multi-piece words being masked
    assert predicted > 0.95 * counted  # skipping overflowing words loses little


def test_masker_draws_random_replacements_from_ordinary_tokens_only(demo_shards: Path) -> None:
    vocab = demo_vocab_of(demo_shards)
    m = Masker.for_vocab(vocab, MaskingSettings(0.15, None, False), seed=0)
    ordinary = {i for i, t in enumerate(vocab.tokens) if not is_reserved(t)}
    assert set(m.rule.random_ids.tolist()) == ordinary and len(ordinary) < len(vocab)


def test_static_is_the_default_and_refuses_dynamic_only_options(uneven: Dataset) -> None:
    static = make(uneven.path, masking="static")
    assert DataConfig(paths=(str(uneven.path),), batch_size=8).masking == "static" and static.masker is None
    for bad in ({"whole_word_mask": True}, {"mlm_probability": 0.3}, {"max_predictions": 10}):
        with pytest.raises(ValueError, match="needs --masking dynamic"):
            DataConfig(paths=(str(uneven.path),), batch_size=8, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mlm_probability: must be in"):
        DataConfig(paths=(str(uneven.path),), batch_size=8, masking="dynamic", mlm_probability=1.5)


def test_masks_are_the_rule_keyed_by_seed_epoch_and_instance(demo_shards: Path) -> None:
    """The contract's rule (the static masks' own), with the trainer's keys: (seed, epoch, instance id)."""
    vocab = demo_vocab_of(demo_shards)
    masking = rule.MaskingRule.for_vocab(vocab, MaskingSettings(0.15, None, whole_word_mask=True))
    got = list(rows(make(demo_shards, whole_word_mask=True)).items())[:300]
    assert len(got) == 300
    for iid, r in got:
        n = len(r["original"])
        keys = instance_keys(5, 0, np.array([iid], np.uint64))
        want = rule.mask(r["original"][None, :], np.array([n]), np.array([r["seg_a"]]), keys, masking)
        np.testing.assert_array_equal(r["positions"], want.positions)
        np.testing.assert_array_equal(r["ids"], want.input_ids[0])


def test_a_weighted_folder_that_wraps_gets_a_fresh_mask_on_each_repeat(uneven: Dataset, second: Dataset) -> None:
    """With weights 0.6/0.4, the 50-sample folder is dealt 207 times per epoch beside the 311-sample one: each
    repeat of an instance is a new pass of its folder, so it is masked afresh, while the heaviest folder
    (read once per epoch) keeps the masks it would get alone."""
    cfg = DataConfig(
        paths=(str(uneven.path), str(second.path)),
        weights=(0.6, 0.4),
        batch_size=8,
        shuffle_buffer=64,
        seed=5,
        masking="dynamic",
    )
    seen: dict[int, list[tuple[int, ...]]] = {}
    for b in PretrainingLoader(cfg, expected_vocab_sha256=None):
        k = b["masked_lm_weights"].sum(1).numpy().astype(int)
        for i, iid in enumerate(b["instance_ids"].tolist()):
            seen.setdefault(uint64(iid), []).append(tuple(b["masked_lm_positions"][i, : k[i]].tolist()))
    repeated = {iid: masks for iid, masks in seen.items() if len(masks) > 1}
    assert len(repeated) >= 40  # the small folder's instances come back within the epoch
    small = set(second.instances.by_id())
    assert set(repeated) <= small  # only the small folder repeats
    fresh = sum(len(set(masks)) == len(masks) for masks in repeated.values())
    assert fresh >= 0.95 * len(repeated), (fresh, len(repeated))
    # The heaviest folder keeps the masks of (seed, epoch, id): the same as when it is read alone.
    alone = rows(make(uneven.path))
    assert len(set(seen) & set(alone)) > 250
    for iid, masks in seen.items():
        if iid not in small and iid in alone:
            np.testing.assert_array_equal(np.array(masks[0]), alone[iid]["positions"])
