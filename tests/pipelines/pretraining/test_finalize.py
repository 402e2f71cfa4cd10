"""The manifest refuses a run that lost documents or instances on the way (a runner dropping elements)."""

from __future__ import annotations

import pytest

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.dataset import DatasetHeader
from bertstream.pipelines.pretraining import stats as S
from bertstream.pipelines.pretraining.finalize import build_manifest
from tests.pipelines.pretraining.test_write import random_batch

HEADER = DatasetHeader(
    vocab={"sha256": "0" * 64, "size": 5, "id_type": "uint16", "special_ids": {}},
    parameters={},
    seed=1,
    inputs=(),
    run={},
)
SHARD = {"path": "pretrain-00000-of-00001.arrow", "format": "arrow", "count": 5, "bytes": 100, "sha256": "0" * 64}


def manifest(used: int, grouped: int, created: int):
    counters = {C.DOCUMENTS_READ: used, C.DOCUMENTS_USED: used, C.INSTANCES_CREATED: created}
    spec = S.StatsSpec(mask_id=4, max_seq_length=128, max_predictions=20, masked_lm_prob=0.15, whole_word=False)
    stats = S.batch_stats(random_batch(5, 0), spec)
    results = [{"shard": 0, "files": [SHARD], "stats": stats}]
    return build_manifest(
        kind="pretraining",
        results=results,
        counters=counters,
        groups=[{"group": 0, "documents": grouped, "tokens": 50}],
        header=HEADER,
        max_seq_length=128,
    )


def test_a_consistent_run_has_a_manifest():
    m = manifest(3, 3, 5)
    assert m.counters[C.INSTANCES] == 5 and m.counters[C.INSTANCES_CREATED] == 5


def test_documents_missing_from_the_groups_fail_the_run():
    with pytest.raises(RuntimeError, match="documents lost between tokenizing and grouping: 3 used, 2 in groups"):
        manifest(3, 2, 5)


def test_instances_missing_from_the_shards_fail_the_run():
    with pytest.raises(RuntimeError, match="instances lost before the shards: 7 created, 5 written"):
        manifest(3, 3, 7)
