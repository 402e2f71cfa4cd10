"""The table of input formats: every name --format offers has its module, with what the readers call."""

from __future__ import annotations

import pytest

from bertstream.pipelines.inputs.detect import Sample
from bertstream.pipelines.inputs.formats import DETECTION_ORDER, FORMATS, LINE_FORMATS, RECORD_FORMATS, format_module
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
    with pytest.raises(ValueError, match="unknown input format 'csv'"):
        format_module("csv")
