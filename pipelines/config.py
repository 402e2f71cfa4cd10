"""The import path of ``PretrainingConfig`` in earlier versions (scripts and ``tests/test_shard_pins.py`` use
it): the config itself lives with its job, in :mod:`pipelines.pretraining.config`."""

from pipelines.pretraining.config import PretrainingConfig

__all__ = ["PretrainingConfig"]
