"""The manifest refuses shard paths that leave the dataset folder."""

from __future__ import annotations

import pytest

from bertstream.schemas.manifest import ShardInfo
from bertstream.schemas.version import SchemaError

SHA = "0" * 64


@pytest.mark.parametrize(
    "path",
    [
        "../other/pretrain-00000-of-00001.arrow",
        "a/../../x.arrow",
        "/etc/passwd",
        "\\\\server\\share\\x.arrow",
        "C:\\data\\x.arrow",
        "s3://bucket/x.arrow",
        "",
    ],
)
def test_shard_paths_outside_the_dataset_folder_are_refused(path):
    with pytest.raises(SchemaError, match="leaves the dataset folder"):
        ShardInfo(path=path, format="arrow", count=1, bytes=1, sha256=SHA)


@pytest.mark.parametrize("path", ["pretrain-00000-of-00004.arrow", "train/part-00000-of-00001.tar", "a..b.arrow"])
def test_relative_shard_paths_are_accepted(path):
    assert ShardInfo(path=path, format="arrow", count=1, bytes=1, sha256=SHA).path == path


def test_manifest_vocab_accessors_and_kind_check():
    from bertstream.schemas.manifest import Manifest, manifest_source, vocab_entry
    from bertstream.schemas.vocab import Vocab

    vocab = Vocab(("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"))
    entry = vocab_entry(vocab, lowercase=True)
    m = Manifest(kind="ner", vocab=entry, parameters={}, seed=0, shards=())
    assert (m.vocab_sha256, m.vocab_size, m.id_type, m.pad_id, m.vocab_file) == (
        vocab.sha256,
        7,
        "uint16",
        0,
        "vocab.txt",
    )
    m.require_kind(("ner", "squad"), source="x")
    with pytest.raises(SchemaError, match="^d/manifest.json: a 'ner' dataset, not 'pretraining'$"):
        m.require_kind(("pretraining",), source=manifest_source("d/"))
    no_pad = Manifest(kind="ner", vocab={**entry, "special_ids": {}}, parameters={}, seed=0, shards=())
    with pytest.raises(SchemaError, match="lacks \\[PAD\\]"):
        _ = no_pad.pad_id


def test_load_vocab_checks_the_manifests_hash(tmp_path):
    import pytest

    from bertstream.schemas.manifest import Manifest, load_vocab, vocab_entry
    from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab, VocabError, VocabMismatchError

    vocab = Vocab((*SPECIAL_TOKENS, "a", "b"))
    m = Manifest(kind="pretraining", vocab=vocab_entry(vocab, lowercase=True), parameters={}, seed=0, shards=())
    files = {"vocab.txt": vocab.text().encode()}
    assert load_vocab(m, files.__getitem__, "d/vocab.txt") == vocab
    files["vocab.txt"] = Vocab((*SPECIAL_TOKENS, "a", "c")).text().encode()
    with pytest.raises(VocabMismatchError, match="d/vocab.txt hashes to .* the manifest says"):
        load_vocab(m, files.__getitem__, "d/vocab.txt")
    files["vocab.txt"] = b"\xff\n"
    with pytest.raises(VocabError, match="not UTF-8"):
        load_vocab(m, files.__getitem__, "d/vocab.txt")


def test_shard_parameters_are_a_typed_view():
    from bertstream.schemas.manifest import ShardParameters

    p = ShardParameters.from_dict({"max_seq_length": 128, "seed": 3, "lowercase": True, "input_format": "text"})
    assert (p.max_seq_length, p.seed, p.masked_lm_prob, p.dedup) == (128, 3, None, "none")
    assert p.recorded() == {"max_seq_length": 128, "seed": 3}
    assert ShardParameters.from_dict({"dedup": "minhash"}).recorded() == {"dedup": "minhash"}
