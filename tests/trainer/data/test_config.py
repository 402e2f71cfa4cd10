from pathlib import Path

import pytest

from trainer.data.config import DataConfig


def test_paths_are_normalised_to_a_tuple_of_strings(tmp_path: Path) -> None:
    assert DataConfig(paths=str(tmp_path), batch_size=4).paths == (str(tmp_path),)
    assert DataConfig(paths=[tmp_path, "memory://x/"], batch_size=4).paths == (str(tmp_path), "memory://x")
    assert DataConfig(paths=["memory://", "/"], batch_size=4).paths == ("memory://", "/")


def test_window_is_one_without_shuffle() -> None:
    assert DataConfig(paths="d", batch_size=4, shuffle=False, shuffle_buffer=500).window == 1
    assert DataConfig(paths="d", batch_size=4, shuffle_buffer=0).window == 1
    assert DataConfig(paths="d", batch_size=4, shuffle_buffer=500).window == 500


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("paths", ()),
        ("paths", ("a", "a/")),
        ("batch_size", 0),
        ("batch_size", True),
        ("format", "parquet"),
        ("shuffle_buffer", -1),
        ("seed", -3),
        ("num_workers", -1),
        ("prefetch_factor", 0),
        ("bucket_batches", 1),
        ("verify", "md5"),
    ],
)
def test_bad_values_are_named(field: str, value: object) -> None:
    kwargs = {"paths": ("d",), "batch_size": 4, field: value}
    with pytest.raises(ValueError, match=field if field != "paths" else "paths"):
        DataConfig(**kwargs)


def test_frozen() -> None:
    cfg = DataConfig(paths="d", batch_size=4)
    with pytest.raises(AttributeError):
        cfg.batch_size = 8  # type: ignore[misc]
