"""Stage 1c, HoldOut (``--eval-fraction F``): whole documents set aside for an evaluation dataset.

A document is held out when a seeded hash of its stable id (``hash64("holdout", seed, doc_id)`` as a number
in [0, 1)) falls below ``F``: the choice depends on the document and the run's seed only, never on the order
of the inputs, the batching, the worker count or the runner, and a document is on one side whole. The hash
is salted apart from the grouping's document key, so held-out documents are no pool's or group's in
particular. Without the option the stage is not in the graph: the training shards keep their bytes.

The run reads its input once and writes two complete datasets (each with its manifest and vocabulary): the
training one in ``--output`` and the evaluation one in ``OUTPUT/eval``. Counters say where every document
went: the training dataset counts each held-out document as held out (``documents_held_out``, not a drop), so
that its ``documents_read`` still reconciles (read = used + dropped + held out); the evaluation dataset's
``documents_read`` is the documents held out. What reading itself counted (files, bytes, lines, characters removed) stays with the training
dataset, whose manifest describes the run's reading.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import apache_beam as beam
import numpy as np

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.inputs.documents import Document, DocumentBatch
from bertstream.schemas.hashing import hash64, uniform_from

EVAL_DIR = "eval"  # the evaluation dataset's folder, inside --output


def held_out(seed: int, doc_id: str, fraction: float) -> bool:
    """Whether ``doc_id`` goes to the evaluation dataset of a run with ``seed`` and ``--eval-fraction``."""
    return bool(uniform_from(np.asarray([hash64("holdout", seed, doc_id)], dtype=np.uint64))[0] < fraction)


def split_batch(batch: DocumentBatch, seed: int, fraction: float) -> tuple[DocumentBatch, DocumentBatch]:
    """``(training, evaluation)`` halves of a batch. The training half keeps the batch's reading counters and
    counts the documents it gives up as held out; the evaluation half counts them read."""
    train: list[Document] = []
    held: list[Document] = []
    for d in batch.documents:
        (held if held_out(seed, d.doc_id, fraction) else train).append(d)
    counters = Counter(batch.counters)
    if held:
        counters[C.DOCUMENTS_HELD_OUT] += len(held)
    return DocumentBatch(train, counters), DocumentBatch(held, Counter({C.DOCUMENTS_READ: len(held)}))


class _HoldOutFn(beam.DoFn):
    EVAL = "eval"

    def __init__(self, seed: int, fraction: float) -> None:
        self.seed = seed
        self.fraction = fraction

    def process(self, batch: DocumentBatch) -> Iterator[DocumentBatch | beam.pvalue.TaggedOutput]:
        train, held = split_batch(batch, self.seed, self.fraction)
        yield train  # always, even when empty: its counters are the reading's
        if held.documents:
            yield beam.pvalue.TaggedOutput(self.EVAL, held)


class HoldOut(beam.PTransform):
    """``PCollection[DocumentBatch]`` -> ``(training, evaluation)`` ``PCollection[DocumentBatch]``."""

    def __init__(self, seed: int, fraction: float) -> None:
        super().__init__()
        self.fn = _HoldOutFn(seed, fraction)

    def expand(self, batches):
        # The main output's type said outright: Beam 2.78 reads process()'s annotation as Union[TaggedOutput,
        # DocumentBatch] and refuses the next stage, which takes DocumentBatch.
        fn = beam.ParDo(self.fn).with_output_types(DocumentBatch)
        split = batches | "Split" >> fn.with_outputs(_HoldOutFn.EVAL, main="train")
        return split["train"], split[_HoldOutFn.EVAL]
