"""Stage 2, Segment: paragraphs -> sentences (``sentences``-format input is already segmented)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import apache_beam as beam

from bertstream.pipelines.pretraining.read import DocumentBatch
from bertstream.pipelines.pretraining.segmenter_batch import split_documents

# (documents as (doc_id, sentences), counters): the tokenizer's input.
SentenceBatch = tuple[list[tuple[str, list[str]]], Counter]


def segment_documents(batch: DocumentBatch) -> SentenceBatch:
    # The whole batch is segmented in one call (one compiled scan), not paragraph by paragraph.
    docs = batch.documents
    split = iter(split_documents([d.paragraphs for d in docs if not d.presegmented]))
    out = [(d.doc_id, d.paragraphs if d.presegmented else next(split)) for d in docs]
    return out, batch.counters


class _SegmentFn(beam.DoFn):
    def process(self, batch: DocumentBatch) -> Iterator[SentenceBatch]:
        yield segment_documents(batch)


class SegmentDocuments(beam.PTransform):
    """``PCollection[DocumentBatch]`` -> ``PCollection[SentenceBatch]``."""

    def expand(self, batches):
        return batches | "Split" >> beam.ParDo(_SegmentFn())
