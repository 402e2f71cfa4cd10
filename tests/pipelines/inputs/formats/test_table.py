"""The table of input formats: every name --format offers has its module, with what the readers call."""

from __future__ import annotations

import inspect

import pytest

from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.formats import (
    DETECTION_ORDER,
    FIELD_FORMATS,
    FORMATS,
    LINE_FORMATS,
    RECORD_FORMATS,
    claimed_by,
    format_module,
)
from bertstream.pipelines.inputs.options import FORMAT_CHOICES


def test_every_format_is_detected_in_turn_and_offered_by_format():
    assert sorted(DETECTION_ORDER) == sorted(FORMATS) and len(set(FORMATS)) == len(FORMATS)
    assert FORMAT_CHOICES == ("auto", *FORMATS)
    assert DETECTION_ORDER[-1] == "sentences"  # takes whatever is left


@pytest.mark.parametrize("name", LINE_FORMATS)
def test_a_format_of_lines_has_detect_anchor_and_parse(name):
    module = format_module(name)
    assert isinstance(module.SPLITS, bool) and (module.anchor is None or callable(module.anchor))
    assert callable(module.parse) and callable(module.detect)


@pytest.mark.parametrize("name", RECORD_FORMATS)
def test_a_format_of_records_has_detect_ranges_and_read(name):
    module = format_module(name)
    assert callable(module.ranges) and callable(module.read)
    assert module.detect(Sample(b"plain words\n", lines=["plain words"])) is None  # no magic, no claim


def test_an_unknown_format_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown input format 'no-such-format'"):
        format_module("no-such-format")  # a name no format will take: '-' is no module name


def test_each_ending_is_claimed_by_one_format_and_detection_asks_the_table():
    claims = [(e, name) for name in FORMATS for e in getattr(format_module(name), "ENDINGS", ())]
    assert all(e.startswith(".") and e == e.lower() for e, _ in claims)
    assert len({e for e, _ in claims}) == len(claims), claims  # no ending claimed twice
    for ending, name in claims:
        assert claimed_by(f"data/file{ending}") == (name, ending)
        assert claimed_by(f"data/FILE{ending.upper()}.gz", (".gz",)) == (name, ending)
    assert claimed_by("data/file.no-format-ending") is None


@pytest.mark.parametrize("name", FIELD_FORMATS)
def test_every_format_with_fields_takes_text_field(name):
    assert (
        "text_field"
        in inspect.signature(format_module(name).parse if name in LINE_FORMATS else format_module(name).read).parameters
    )
