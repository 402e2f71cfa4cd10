"""Stage 2, Segment: paragraphs -> sentences (``sentences``-format input is already segmented)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import apache_beam as beam

from pipelines.pretraining.read import DocumentBatch
from pipelines.pretraining.segmenter import split_paragraphs

# (documents as (doc_id, sentences), counters): the tokenizer's input.
SentenceBatch = tuple[list[tuple[str, list[str]]], Counter]


def segment_documents(batch: DocumentBatch) -> SentenceBatch:
    out = []
    for doc in batch.documents:
        if doc.presegmented:
            out.append((doc.doc_id, doc.paragraphs))
        else:
            out.append((doc.doc_id, split_paragraphs(doc.paragraphs)))
    return out, batch.counters


class _SegmentFn(beam.DoFn):
    def process(self, batch: DocumentBatch) -> Iterator[SentenceBatch]:
        yield segment_documents(batch)


class SegmentDocuments(beam.PTransform):
    """``PCollection[DocumentBatch]`` -> ``PCollection[SentenceBatch]``."""

    def expand(self, batches):
        return batches | "Split" >> beam.ParDo(_SegmentFn())
