"""``DataConfig``: everything that shapes the pretraining batch stream, validated up front; and the data section
of ``berttrain pretrain`` (``PretrainData``, its flags), which makes the loader's ``DataConfig``."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

from configs.errors import ConfigError, check
from configs.options import opt

FORMATS = ("auto", "arrow", "webdataset")
VERIFY_MODES = ("sha256", "size")
MASKING_MODES = ("static", "dynamic")
# The dynamic-only masking options and their defaults (what static masking must leave them at).
DYNAMIC_ONLY: dict[str, Any] = {"mlm_probability": 0.15, "max_predictions": None, "whole_word_mask": False}


def check_masking(cfg: Any) -> None:
    """Validate the masking options of ``cfg`` (``masking``, ``mlm_probability``, ``max_predictions``,
    ``whole_word_mask``): the one rule for the loader's ``DataConfig`` and the command line's objective
    section. Raises ``ConfigError`` naming the field (the CLI names its flag)."""
    check(cfg.masking in MASKING_MODES, "masking", f"must be one of {MASKING_MODES}, got {cfg.masking!r}")
    p = cfg.mlm_probability
    ok = isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p < 1
    check(ok, "mlm_probability", f"must be in (0, 1), got {p}")
    k = cfg.max_predictions
    ok = k is None or (isinstance(k, int) and not isinstance(k, bool) and k >= 1)
    check(ok, "max_predictions", f"must be >= 1, got {k}")
    for name, default in DYNAMIC_ONLY.items():
        check(
            cfg.masking == "dynamic" or getattr(cfg, name) == default,
            name,
            "needs --masking dynamic (static masks are read from the shards as written)",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig:
    """Streaming pretraining data.

    ``paths`` are dataset directories (local paths or fsspec URLs such as ``s3://b/ds``), each holding a
    ``manifest.json``; their shards are read as one dataset. ``batch_size`` is per rank.

    ``weights`` (one per path, > 0; relative, normalised here) mix the folders instead: each is its own
    dataset with its own shuffled passes, dealt into every global batch in proportion to its weight. An
    epoch is then the samples in which the heaviest-weighted folder is read once (its full size); every
    other folder gets ``round(size_heaviest * weight / weight_heaviest)`` samples per epoch, wrapping into
    a fresh pass when that is more than it holds and continuing next epoch where it stopped when less.

    Shuffling is index-addressable so that a position is three integers: each epoch permutes the shard
    order, then permutes samples inside consecutive windows of ``shuffle_buffer`` samples of that stream
    (same memory and locality as a shuffle buffer of that size, but every position is computable).
    ``verify="sha256"`` hashes every shard when it is opened (with ``skip_corrupt`` all shards are hashed
    up front instead, so every rank excludes the same shards before the step count is fixed);
    ``"size"`` only compares file sizes with the manifest and relies on decode checks.

    ``masking="static"`` serves the shards' masks as written; ``"dynamic"`` rebuilds each original sequence
    and masks it afresh per (seed, epoch, instance id) with ``mlm_probability``, ``max_predictions`` (None:
    no cap beyond the count rule) and ``whole_word_mask`` (see :mod:`trainer.data.masking`).
    """

    paths: tuple[str, ...]
    batch_size: int
    format: str = "auto"
    shuffle: bool = True
    shuffle_buffer: int = 10_000
    seed: int = 0
    num_workers: int = 0
    prefetch_factor: int = 2
    pin_memory: bool = False
    length_bucketing: bool = False
    bucket_batches: int = 16
    drop_remainder: bool = True
    skip_corrupt: bool = False
    verify: str = "sha256"
    weights: tuple[float, ...] | None = None
    masking: str = "static"
    mlm_probability: float = 0.15
    max_predictions: int | None = None
    whole_word_mask: bool = False

    def __post_init__(self) -> None:
        raw = self.paths
        paths: Sequence[str | PathLike[str]] = (raw,) if isinstance(raw, (str, PathLike)) else raw
        norm = tuple(_strip_slash(str(p)) for p in paths)
        object.__setattr__(self, "paths", norm)
        if not norm:
            raise ValueError("DataConfig.paths: at least one dataset directory is required")
        keys = [dataset_key(p) for p in norm]
        if len(set(keys)) != len(keys):  # also `./out/good` and `out/good`: the same samples twice
            raise ValueError(f"DataConfig.paths: duplicate dataset directory in {norm}")
        _positive("batch_size", self.batch_size)
        if self.format not in FORMATS:
            raise ValueError(f"DataConfig.format must be one of {FORMATS}, got {self.format!r}")
        if not isinstance(self.shuffle_buffer, int) or self.shuffle_buffer < 0:
            raise ValueError(f"DataConfig.shuffle_buffer must be an int >= 0, got {self.shuffle_buffer!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"DataConfig.seed must be an int >= 0, got {self.seed!r}")
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"DataConfig.num_workers must be an int >= 0, got {self.num_workers!r}")
        _positive("prefetch_factor", self.prefetch_factor)
        if not isinstance(self.bucket_batches, int) or self.bucket_batches < 2:
            raise ValueError(f"DataConfig.bucket_batches must be an int >= 2, got {self.bucket_batches!r}")
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"DataConfig.verify must be one of {VERIFY_MODES}, got {self.verify!r}")
        if self.weights is not None:
            weights = tuple(self.weights)
            object.__setattr__(self, "weights", weights)
            if len(weights) != len(norm):
                raise ValueError(f"DataConfig.weights: {len(weights)} weights for {len(norm)} paths")
            for p, w in zip(norm, weights):
                if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w > 0):
                    raise ValueError(f"DataConfig.weights: {p} has weight {w!r}; weights must be finite and > 0")
        check_masking(self)  # static masks are the shards' own: the dynamic-only options would do nothing

    @property
    def window(self) -> int:
        """Shuffle window in samples; 1 means stream order."""
        return max(1, self.shuffle_buffer) if self.shuffle else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PretrainData:
    """The pretraining shards and how they are read."""

    sources: tuple[str, ...] = opt(
        help="Dataset folder with a manifest.json (repeatable; local or URL). DIR:WEIGHT on every --data mixes "
        "the folders by weight instead of reading them as one dataset.",
        flag="--data",
    )
    eval_data: str | None = opt(None, "Evaluation dataset folder.")
    data_format: str = opt(
        "auto",
        "Shard format to read --data in (auto: Arrow where a dataset has it); --eval-data without it is read in the "
        "format it has.",
        flag="--format",
        choices=("auto", "arrow", "webdataset"),
    )
    num_workers: int = opt(2, "Data-loader worker processes per rank.")
    shuffle_buffer: int = opt(10_000, cli=False)
    skip_corrupt: bool = opt(False, "Skip (and count) shards whose checksum fails instead of stopping.")

    def __post_init__(self) -> None:
        check(len(self.sources) > 0, "data", "at least one --data DIR is required")
        try:
            paths = self.paths
        except ValueError as e:
            raise ConfigError("data", str(e)) from None
        keys = [dataset_key(d) for d in paths]
        twice = sorted({d for d, k in zip(paths, keys) if keys.count(k) > 1})
        check(not twice, "data", f"the same dataset is given more than once: {', '.join(twice)}")
        check(self.num_workers >= 0, "num_workers", f"must be >= 0, got {self.num_workers}")

    @property
    def paths(self) -> tuple[str, ...]:
        """The ``--data`` folders, without their weights."""
        return split_data_args(self.sources)[0]

    @property
    def weights(self) -> tuple[float, ...] | None:
        """The ``--data DIR:WEIGHT`` weights, or None (bare folders are read as one dataset)."""
        return split_data_args(self.sources)[1]

    def loader_config(self, *, batch_size: int, seed: int, pin_memory: bool, masking: Any) -> DataConfig:
        """The training stream's ``DataConfig``: this section, with the run's batch size, seed and device, and
        the masking options of ``masking`` (the objective section; :func:`check_masking` has seen them)."""
        return DataConfig(
            paths=self.paths,
            weights=self.weights,
            batch_size=batch_size,
            num_workers=self.num_workers,
            seed=seed,
            shuffle_buffer=self.shuffle_buffer,
            skip_corrupt=self.skip_corrupt,
            format=self.data_format,
            pin_memory=pin_memory,
            **{name: getattr(masking, name) for name in ("masking", *DYNAMIC_ONLY)},
        )

    def eval_loader_config(self, *, batch_size: int, format: str) -> DataConfig:
        """The evaluation set's ``DataConfig`` (``--eval-data`` in stream order, read in ``format``)."""
        assert self.eval_data is not None  # called only with --eval-data
        return DataConfig(paths=(self.eval_data,), batch_size=batch_size, shuffle=False, num_workers=0, format=format)


# A trailing ":<number>" is a weight; everything before it is the folder (paths may hold ':' themselves:
# s3://bucket/x, C:\\data). A non-numeric tail ("C:", "x:y") stays part of the path.
_WEIGHTED = re.compile(r"(?P<path>.+):(?P<weight>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def parse_data_arg(text: str) -> tuple[str, float | None]:
    """``--data DIR[:WEIGHT]`` -> ``(DIR, WEIGHT or None)``; a weight must be > 0."""
    m = _WEIGHTED.fullmatch(text)
    if m is None:
        return text, None
    weight = float(m["weight"])
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"{text}: the weight after the last ':' must be > 0, got {m['weight']}")
    return m["path"], weight


def weight_notes(args: Sequence[str]) -> list[str]:
    """One line per ``--data DIR:N`` read as a weight while a folder named ``DIR:N`` exists: the reading is
    said, with the spelling for the folder (a trailing ``/`` ends the path, so no weight is read)."""
    from pathlib import Path

    notes = []
    for a in args:
        path, weight = parse_data_arg(a)
        if weight is not None and "://" not in a and Path(a).exists():
            notes.append(
                f"--data {a} read as folder {path!r} with weight {weight:g}; write {a}/ for a folder of that name"
            )
    return notes


def split_data_args(args: Sequence[str]) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
    """``--data`` values -> (folders, weights or None). Weights go on every folder or on none."""
    parsed = [parse_data_arg(a) for a in args]
    weights = [w for _, w in parsed]
    if all(w is None for w in weights):
        return tuple(p for p, _ in parsed), None
    bare = [a for a, w in zip(args, weights) if w is None]
    if bare:
        raise ValueError(f"give every --data a weight (DIR:WEIGHT) or none; {', '.join(bare)} has none")
    return tuple(p for p, _ in parsed), tuple(float(w) for w in weights if w is not None)


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"DataConfig.{name} must be an int >= 1, got {value!r}")


def dataset_key(path: str) -> str:
    """A dataset folder's identity: a local path resolved (so spellings of one folder agree), a URL as given."""
    from pathlib import Path

    return path.rstrip("/") if "://" in path else str(Path(path).resolve())


def _strip_slash(path: str) -> str:
    stripped = path.rstrip("/")
    return path if not stripped or stripped.endswith(":") else stripped  # keep "/" and "memory://"
