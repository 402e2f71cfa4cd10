"""Values shipped to the workers by reference: written once, read back once per process, checked."""

from __future__ import annotations

import pytest

from bertstream.pipelines.pretraining import shipped as S


def test_a_shipped_value_comes_back_equal_from_its_file(tmp_path):
    value = {"tokens": ["[PAD]", "a", "b"] * 1000, "lowercase": True}
    ref = S.ship(value, str(tmp_path), "vocab")
    assert (tmp_path / ref.path.rsplit("/", 1)[1]).exists()
    S._CACHE.clear()  # as a worker process that did not ship it
    assert ref.get() == value
    assert ref.get() is ref.get()  # read once per process
    assert S.resolve(ref) == value and S.resolve(value) is value


def test_a_changed_file_is_refused(tmp_path):
    ref = S.ship("the vocabulary", str(tmp_path), "vocab-text")
    S._CACHE.clear()
    with open(ref.path, "wb") as f:
        f.write(b"something else")
    with pytest.raises(RuntimeError, match="changed after the run began"):
        ref.get()


def test_the_reference_pickles_small(tmp_path):
    import pickle

    ref = S.ship("x" * 1_000_000, str(tmp_path), "big")
    assert len(pickle.dumps(ref)) < 300
