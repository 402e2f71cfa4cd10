"""The contract between ``pipelines`` (writers) and ``trainer`` (readers): one version for all."""

from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo, shard_name
from bertstream.schemas.version import SCHEMA_VERSION, SchemaError
from bertstream.schemas.vocab import Vocab, VocabError, vocab_sha256

__all__ = [
    "MANIFEST_NAME",
    "Manifest",
    "SCHEMA_VERSION",
    "SchemaError",
    "ShardInfo",
    "Vocab",
    "VocabError",
    "shard_name",
    "vocab_sha256",
]
