"""Streaming pretraining data: manifests -> shards (Arrow or WebDataset, local or fsspec) -> padded batches.

Typical use in a training loop::

    cfg = DataConfig(paths=("data/wiki",), batch_size=256, num_workers=4, seed=run_seed)
    loader = PretrainingLoader(cfg, expected_vocab_sha256=vocab.sha256, world_size=world, rank=rank)
    if resuming:
        loader.load_state_dict(checkpoint["data"])
    while loader.epoch < num_epochs:
        for batch in loader:              # remaining batches of loader.epoch, then the epoch advances
            ...
            checkpoint["data"] = loader.state_dict()

``DataConfig(paths=("data/wiki", "data/books"), weights=(0.7, 0.3), ...)`` mixes folders by weight instead of
concatenating them. The state is global (samples consumed in the global order), so it loads into a loader
with another world size and per-rank batch of the same product, and any ``num_workers``.
"""

from bertstream.schemas.vocab import VocabMismatchError
from bertstream.trainer.data.collate import PAD_MULTIPLE
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.loader import PretrainingLoader
from bertstream.trainer.data.plan import EpochPlan, steps_per_epoch
from bertstream.trainer.data.reader import BatchReader
from bertstream.trainer.data.refs import ShardError
from bertstream.trainer.data.sources import Catalog, load_manifest, open_catalog

__all__ = [
    "PAD_MULTIPLE",
    "BatchReader",
    "Catalog",
    "DataConfig",
    "EpochPlan",
    "PretrainingLoader",
    "ShardError",
    "VocabMismatchError",
    "load_manifest",
    "open_catalog",
    "steps_per_epoch",
]
