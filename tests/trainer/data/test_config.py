from pathlib import Path

import pytest

from bertstream.cli.errors import UsageError
from bertstream.trainer.data.config import DataConfig, parse_data_arg, split_data_args


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


@pytest.mark.parametrize(
    ("arg", "parsed"),
    [
        ("wiki_shards:0.7", ("wiki_shards", 0.7)),
        ("books:3", ("books", 3.0)),
        ("books:.5", ("books", 0.5)),
        ("books:1e-2", ("books", 0.01)),
        ("s3://bucket/x:0.25", ("s3://bucket/x", 0.25)),
        ("s3://bucket/x", ("s3://bucket/x", None)),
        ("C:\\data\\wiki", ("C:\\data\\wiki", None)),
        ("C:\\data\\wiki:2", ("C:\\data\\wiki", 2.0)),
        ("d:x", ("d:x", None)),
        ("d:inf", ("d:inf", None)),
        ("http://host:8080/", ("http://host:8080/", None)),  # a trailing '/' keeps a numeric tail a path
        ("plain", ("plain", None)),
    ],
)
def test_only_a_trailing_number_is_a_weight(arg: str, parsed: tuple) -> None:
    assert parse_data_arg(arg) == parsed


def test_weights_go_on_every_folder_or_none() -> None:
    assert split_data_args(["a", "b"]) == (("a", "b"), None)
    assert split_data_args(["a:1", "s3://b/c:3"]) == (("a", "s3://b/c"), (1.0, 3.0))
    with pytest.raises(ValueError, match="give every --data a weight .* b has none"):
        split_data_args(["a:1", "b"])
    for bad in ("a:0", "a:-1", "a:0.0"):
        with pytest.raises(ValueError, match="must be a finite number > 0"):
            parse_data_arg(bad)
    # 1e400 reads as inf: the message said "must be > 0" of a number that is
    with pytest.raises(
        ValueError, match="a:1e400: the weight after the last ':' must be a finite number > 0, got 1e400"
    ):
        parse_data_arg("a:1e400")
    with pytest.raises(ValueError, match="weights must be finite and > 0") as e:
        DataConfig(paths=("a", "b"), batch_size=4, weights=(1.0, float("nan")))
    # the weights come from --data DIR:W: the error names that flag (issue 33: it named --weights, no flag)
    from bertstream.cli.options import flag_for
    from bertstream.trainer.config import TrainConfig

    assert flag_for(TrainConfig, e.value.param) == "--data"


def test_loader_workers_share_the_node_ceiling_among_its_ranks(tmp_path, monkeypatch):
    # issue 44: the ceiling is the node's; torchrun's 8 ranks of --num-workers N start 8N workers on it
    from bertstream.cli.machine import process_ceiling

    ceiling = process_ceiling()
    assert DataConfig(paths=str(tmp_path), batch_size=4, num_workers=ceiling).num_workers == ceiling
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert DataConfig(paths=str(tmp_path), batch_size=4, num_workers=ceiling // 4).num_workers == ceiling // 4
    with pytest.raises(UsageError, match=rf"at most {ceiling // 4} per rank \(4 ranks on this node share {ceiling}"):
        DataConfig(paths=str(tmp_path), batch_size=4, num_workers=ceiling // 4 + 1)


def test_an_evaluation_set_is_read_in_order_with_its_own_masks_beside_any_training_data() -> None:
    """The data side says how --eval-data is read (the run's loop and inputs set none of it): one folder in
    stream order, static masks, the main process, a corrupt shard stops; --format where the set has it."""
    train = DataConfig(
        paths=("a:1", "b:3"),
        batch_size=8,
        seed=5,
        format="webdataset",
        num_workers=3,
        skip_corrupt=True,
        masking="dynamic",
        mlm_probability=0.3,
        whole_word_mask=True,
    )
    ev, note = train.evaluation("held", ("webdataset", "arrow"))
    assert note is None
    assert (ev.paths, ev.weights, ev.format, ev.batch_size, ev.seed) == (("held",), None, "webdataset", 8, 5)
    assert (ev.shuffle, ev.num_workers, ev.skip_corrupt, ev.masking) == (False, 0, False, "static")
    assert (ev.mlm_probability, ev.max_predictions, ev.whole_word_mask) == (0.15, None, False)
    ev, note = train.evaluation("held", ("arrow",))
    assert ev.format == "auto"
    assert note == "--eval-data held has no webdataset shards: read as arrow"
    assert DataConfig(paths="d", batch_size=4).evaluation("held", ("arrow",))[1] is None
