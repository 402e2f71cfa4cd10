"""Small datasets shared by the trainer.data tests (written once per session, read-only afterwards)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.lib.synthetic_shards import Instances, bert_like_vocab, make_instances, write_dataset
from bertstream.schemas.vocab import Vocab

# Uneven on purpose: a 5-instance shard, an empty one, and record batches that do not divide counts.
UNEVEN_COUNTS = (37, 120, 5, 0, 88, 61)


@dataclass(frozen=True)
class Dataset:
    path: Path
    instances: Instances
    vocab: Vocab

    @property
    def ids(self) -> set[int]:
        return {int(i) for i in self.instances.instance_id}


@pytest.fixture(scope="session")
def vocab() -> Vocab:
    return bert_like_vocab()


@pytest.fixture(scope="session")
def uneven(tmp_path_factory: pytest.TempPathFactory, vocab: Vocab) -> Dataset:
    """311 instances of lengths 8..128 (60% full), Arrow and WebDataset shards of uneven sizes."""
    inst = make_instances(sum(UNEVEN_COUNTS), seed=7, vocab=vocab, full_fraction=0.6)
    root = tmp_path_factory.mktemp("uneven")
    write_dataset(root, inst, UNEVEN_COUNTS, vocab=vocab, rows_per_batch=16)
    return Dataset(root, inst, vocab)


@pytest.fixture(scope="session")
def second(tmp_path_factory: pytest.TempPathFactory, vocab: Vocab) -> Dataset:
    """Another directory with the same vocab and disjoint instance ids (for multi-directory reads)."""
    inst = make_instances(50, seed=8, vocab=vocab, first_id=10_000)
    root = tmp_path_factory.mktemp("second")
    write_dataset(root, inst, (30, 20), vocab=vocab)
    return Dataset(root, inst, vocab)


def uint64(x: int) -> int:
    """instance_ids travel as int64 tensors; map back to the unsigned id."""
    return x & 0xFFFF_FFFF_FFFF_FFFF
