"""Hostile JSON text fails as JSON, in every reader of JSON files: nesting past Python's stack (a manifest.json of
100,000 ``[`` was a RecursionError traceback in ``berttrain pretrain``), an integer past Python's digit limit, bytes
that are no UTF-8."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bertstream.pipelines.inputs.formats import jsonl
from bertstream.schemas import json_text
from bertstream.schemas.manifest import Manifest
from bertstream.schemas.version import SchemaError, decode_metadata
from bertstream.schemas.vocab import Vocab, VocabError
from bertstream.trainer.hf.config import HFCheckpointError, read_config

DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = [DEEP, '{"a": ' + DEEP + "}", "1" * 5000, b'{"a": "\xff"}']


@pytest.mark.parametrize("text", HOSTILE, ids=["deep", "deep-in-object", "long-int", "no-utf8"])
def test_every_text_that_is_no_json_value_is_a_json_decode_error(text):
    with pytest.raises(json.JSONDecodeError):
        json_text.loads(text)
    assert json_text.loads('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}


def test_the_readers_of_json_files_say_one_line_naming_the_file(tmp_path):
    with pytest.raises(SchemaError, match=r"^manifest.json: malformed JSON \(nested deeper than Python reads"):
        Manifest.from_json(DEEP)
    (tmp_path / "tokenizer.json").write_text(DEEP)
    with pytest.raises(VocabError, match=r"tokenizer.json: malformed JSON \(nested deeper"):
        Vocab.load(tmp_path / "tokenizer.json")
    (tmp_path / "config.json").write_text('{"hidden_size": ' + DEEP + "}")
    with pytest.raises(HFCheckpointError, match=r"config.json: malformed JSON \(nested deeper"):
        read_config(tmp_path / "config.json")
    with pytest.raises(SchemaError, match="schema metadata does not decode"):
        decode_metadata({b"bertstream.schema_version": b"1", b"bertstream.parameters": DEEP.encode()})


def test_a_json_line_nested_past_the_stack_is_a_counted_drop():
    counters: Counter = Counter()
    lines = [(0, '{"text": "One sentence here. And another."}'), (50, '{"text": ' + DEEP + "}")]
    docs = list(jsonl.parse(lines, "f", counters))
    assert len(docs) == 1 and counters["documents_dropped.malformed_json"] == 1, counters
