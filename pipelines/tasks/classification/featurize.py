"""Stage 2 (classification, regression), Featurize: rows -> ``[CLS] A [SEP] (B [SEP])`` with a label id.

Pairs are truncated longest-first exactly as BERT's ``truncate_seq_pair`` (one token at a time from the
longer text; a tie trims B). Labels map to ids through the run's label set (a side input: fixed, or derived
from the training split). A label outside a fixed set drops the row in a training split (counted) and stops
the run in an evaluation split: scoring a model on labels it was never trained on would be wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from bertstream.pipelines.common.counters import LABEL_NOT_IN_SET, NO_TOKENS, Tally, drop
from bertstream.pipelines.tasks.classification.parse import UNIT, TextRow
from bertstream.pipelines.tasks.features import Layout, TaskTokenizer, ragged, table, unknown_label_error
from bertstream.pipelines.tasks.read import RecordBatch, where
from bertstream.pipelines.tokenizer.load import TokenizerSpec
from bertstream.schemas import id_types
from bertstream.schemas import tasks as T


def truncate_pair(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """Lengths after BERT's longest-first truncation (``while a + b > max: pop from the longer, B on a tie``)."""
    excess = len_a + len_b - max_tokens
    if excess <= 0:
        return len_a, len_b
    first = min(excess, abs(len_a - len_b))
    if len_a > len_b:
        len_a -= first
    else:
        len_b -= first
    rest = excess - first  # now equal: B, A, B, A, ...
    return len_a - rest // 2, len_b - (rest + 1) // 2


class RowFeaturizer:
    """Pure featurization of a batch of ``TextRow`` (used by the DoFn and by tests)."""

    def __init__(
        self, spec: TokenizerSpec, *, kind: str, max_seq_length: int, training: bool, labeled: bool, label_source: str
    ) -> None:
        self.tok = TaskTokenizer(spec)
        self.kind = kind
        self.id_type = spec.vocab.id_type
        self.max_seq_length = max_seq_length
        self.training = training
        self.labeled = labeled
        self.label_source = label_source

    def __call__(self, batch: RecordBatch, labels: Sequence[str], layout: Layout, tally: Tally) -> pa.Table:
        rows: list[TextRow] = batch.records
        pair = any(r.text_b is not None for r in rows)
        a_ids = self.tok.ids([self.tok.clean(r.text_a, tally) for r in rows])
        b_ids = self.tok.ids([self.tok.clean(r.text_b or "", tally) for r in rows]) if pair else [None] * len(rows)
        label_id = {name: i for i, name in enumerate(labels)}
        cls_, sep = np.array([self.tok.cls_id]), np.array([self.tok.sep_id])
        out_ids, seg_a, out_labels, row_ids, globals_ = [], [], [], [], []
        for i, (row, a, b) in enumerate(zip(rows, a_ids, b_ids)):
            place = where(batch.path, row.line)
            if not len(a) or (b is not None and not len(b)):
                tally.note(drop(NO_TOKENS, UNIT), batch.file_index, row.line, place)
                continue
            label = None
            if self.labeled:
                assert row.label is not None  # a labelled layout drops rows without one when reading
                if self.kind == T.REGRESSION:
                    label = float(row.label)
                elif row.label in label_id:
                    label = label_id[row.label]
                elif self.training:
                    tally.note(drop(LABEL_NOT_IN_SET, UNIT), batch.file_index, row.line, place)
                    continue
                else:
                    raise unknown_label_error(row.label, labels, place, self.label_source)
            if b is None:
                keep_a, keep_b = min(len(a), self.max_seq_length - 2), 0
                ids = np.concatenate((cls_, a[:keep_a], sep))
            else:
                keep_a, keep_b = truncate_pair(len(a), len(b), self.max_seq_length - 3)
                ids = np.concatenate((cls_, a[:keep_a], sep, b[:keep_b], sep))
            removed = len(a) - keep_a + (0 if b is None else len(b) - keep_b)
            if removed:
                tally.add("rows_truncated")
                tally.add("tokens_removed_by_truncation", removed)
            tally.add(f"{UNIT}_used")
            tally.add("tokens", len(ids))
            out_ids.append(ids)
            seg_a.append(keep_a + 2)
            out_labels.append(label)
            row_ids.append(T.row_id(batch.file_index, row.line))
            globals_.append(layout.global_index(batch, i))
        row_layout = T.SEQUENCE_CLASS if self.kind == T.CLASSIFICATION else T.SEQUENCE_VALUE
        label_type = row_layout.fields(pa.int32())[-1].type
        return table(
            row_layout,
            self.id_type,
            {
                T.ROW_ID: np.asarray(row_ids, dtype=np.uint64),
                T.INPUT_IDS: ragged(out_ids, id_types.arrow_type(self.id_type)),
                T.SEGMENT_A_LENGTH: np.asarray(seg_a, dtype=np.int16),
                T.LABEL: pa.array(out_labels, type=label_type),
            },
            np.asarray(globals_, dtype=np.int64),
        )
