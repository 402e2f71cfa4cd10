"""The schema version switch lives in one place: every reader asks ``bertstream.schemas.version.check_version``.

Writers stamp ``SCHEMA_VERSION``; readers accept ``READABLE_VERSIONS``. Changing those two names (and nothing
else) is what a v2 writer and a reader that still decodes v1 need, which these tests exercise by patching them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bertstream.schemas import pretraining as P
from bertstream.schemas import tasks as T
from bertstream.schemas import version, wds
from bertstream.schemas.manifest import Manifest, ShardInfo, vocab_entry
from bertstream.schemas.version import SchemaError, check_version
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab


def test_check_version_names_source_found_and_readable():
    assert check_version(1, source="x") == 1
    with pytest.raises(SchemaError, match=r"^data/manifest\.json: schema version 7, this build reads 1$"):
        check_version(7, source="data/manifest.json")
    with pytest.raises(SchemaError, match="schema version None"):
        check_version(None, source="m")


def _manifest(schema_version: int) -> Manifest:
    return Manifest(
        kind="pretraining",
        vocab=vocab_entry(Vocab(SPECIAL_TOKENS), lowercase=True),
        parameters={},
        seed=1,
        shards=(ShardInfo("pretrain-00000-of-00001.arrow", "arrow", 1, 1, "0" * 64),),
        schema_version=schema_version,
    )


READERS = {
    "manifest": lambda: Manifest.from_json(_manifest(version.SCHEMA_VERSION).to_json(), source="src"),
    "pretraining shard": lambda: P.check_schema(P.arrow_schema("uint16"), source="src"),
    "task shard": lambda: T.check_schema(
        T.arrow_schema(T.TOKEN_LABELS, T.NER, "int32"), T.NER, T.TOKEN_LABELS, source="src"
    ),
}


@pytest.mark.parametrize("reader", READERS, ids=str)
def test_a_v2_file_is_refused_by_name_until_the_switch_reads_it(reader, monkeypatch):
    monkeypatch.setattr(version, "SCHEMA_VERSION", 2)  # a v2 writer
    with pytest.raises(SchemaError, match="^src: schema version 2, this build reads 1$"):
        READERS[reader]()
    monkeypatch.setattr(version, "READABLE_VERSIONS", (1, 2))  # the readers' switch
    READERS[reader]()


def test_manifest_version_is_what_from_json_returns():
    m = _manifest(1)
    assert Manifest.from_json(m.to_json()) == m
    with pytest.raises(SchemaError, match="schema version 3, this build reads 1"):
        Manifest.from_json(dataclasses.replace(m, schema_version=3).to_json())


def test_sample_layout_versions_go_through_the_same_check():
    payload = bytearray(wds.encode_instance(np.array([2, 7, 3]), 2, np.array([1]), np.array([9]), 0, 5, 2))
    payload[0] = 2
    with pytest.raises(SchemaError, match="^s: layout version 2, this build reads 1$"):
        wds.decode_payload(bytes(payload), source="s")
    u8 = np.frombuffer(bytes(payload), np.uint8)
    with pytest.raises(SchemaError, match="^shard.tar: sample layout version 2, this build reads 1$"):
        wds.decode_headers(u8, np.array([0]), np.array([len(payload)]), "uint16", source="shard.tar")
