"""The warning that ends a pretraining run whose figures say its input was read in the wrong layout."""

from __future__ import annotations

from bertstream.pipelines.common.dataset import load_manifest
from bertstream.pipelines.report.inspection import degenerate_warning, manifest_warning


def _stats(is_next: float, instances: int = 30) -> dict:
    return {"instances": instances, "next_sentence": {"is_next": is_next, "not_next": round(1 - is_next, 4)}}


def test_paragraphs_read_as_sentences_are_named():
    # issue 32's file: three paragraphs under the default `sentences`: sentences 3, instances 30, IsNext 0.000
    counters = {"documents_used": 3, "sentences": 3, "tokens": 90}
    line = degenerate_warning(counters, _stats(0.0), "sentences", 128)
    assert line is not None and line.startswith("warning: degenerate data (IsNext 0.000): ")
    assert "--format text" in line and "--format lines" in line


def test_one_document_and_overlong_sentences_are_named():
    one = degenerate_warning({"documents_used": 1, "sentences": 9, "tokens": 137}, _stats(0.39), "text", 128)
    assert one is not None and "(1 document)" in one and "--format text found one document" in one
    long = degenerate_warning(
        {"documents_used": 50, "sentences": 60, "tokens": 60 * 300}, _stats(0.3), "sentences", 128
    )
    assert long is not None and "sentences of 300 tokens on average, longer than max_seq_length 128" in long


def test_a_healthy_dataset_has_no_warning(demo_shards):
    # the pydoc corpus as the demo writes it: 70 documents, about half IsNext
    assert manifest_warning(load_manifest(str(demo_shards))) is None
    counters = {"documents_used": 70, "sentences": 3921, "tokens": 111742}
    assert degenerate_warning(counters, _stats(0.446), "text", 128) is None
    assert degenerate_warning(counters, {"instances": 0}, "text", 128) is None
