from __future__ import annotations

import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.tasks.ner import parse as CN
from tests.conftest import shared_path

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
bad NN I-NP Z-TAG

Only NNP B-NP I-PER
"""


def conll(text: str, scheme: str = "iob2") -> tuple[list[CN.Sentence], Tally]:
    tally = Tally()
    return list(CN.parse_conll(text.split("\n"), "v.txt", 0, scheme, tally)), tally


def test_conll_sentences_and_malformed_lines_drop_their_sentence_with_line_numbers():
    sentences, tally = conll(CONLL)
    assert [(s.line, s.words, s.tags) for s in sentences] == [
        (3, ["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
        (14, ["Only"], ["I-PER"]),
    ]
    c = tally.counters()
    assert c["sentences_read"] == 4 and c["sentences_dropped.malformed_line"] == 2 and c["docstart_lines"] == 1
    assert c["first_lines"]["lines_malformed.wrong_field_count"] == ["v.txt:8"]
    assert c["first_lines"]["lines_malformed.bad_tag"] == ["v.txt:12"]
    assert c["first_lines"]["sentences_dropped.malformed_line"] == ["v.txt:7", "v.txt:10"]
    assert c["first_lines"]["invalid_iob2_transitions"] == ["v.txt:14"]  # I-PER opening an entity


def test_iob1_is_converted_to_iob2():
    assert CN.iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG"]) == (
        ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG"],
        3,
    )
    sentences, tally = conll("Only NNP B-NP I-PER\nMe NNP I-NP I-PER\n", scheme="iob1")
    assert sentences[0].tags == ["B-PER", "I-PER"] and tally.counts["tags_converted_iob1_to_iob2"] == 1
    assert "invalid_iob2_transitions" not in tally.counts


def test_a_file_that_is_not_conll_is_a_clear_error(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text("This is prose, not CoNLL.\nIt has sentences on lines.\n")
    with pytest.raises(UsageError, match="not a CoNLL file") as e:
        CN.looks_like_conll(str(p))
    assert e.value.param == "input"
    with pytest.raises(InputError, match="not a CoNLL file"):
        conll("a b\nc d e\nf\n\ng h i j k\n")
    CN.looks_like_conll(str(shared_path("tasks", "conll2003", "valid.txt")))
