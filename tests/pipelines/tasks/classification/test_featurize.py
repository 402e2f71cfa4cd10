from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tasks import read as R
from bertstream.pipelines.tasks.classification import parse as TB
from bertstream.pipelines.tasks.classification.featurize import RowFeaturizer, truncate_pair
from bertstream.pipelines.tasks.features import Layout
from bertstream.pipelines.tokenizer.load import load_tokenizer
from bertstream.schemas import tasks as T
from tests.conftest import shared_path


def bert_truncate_seq_pair(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """BERT's reference loop (run_classifier.py), on lengths."""
    while len_a + len_b > max_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_truncation_is_berts_longest_first():
    for a, b, m in itertools.product(range(12), range(12), range(1, 15)):
        assert truncate_pair(a, b, m) == bert_truncate_seq_pair(a, b, m), (a, b, m)


def featurize(spec, rows, *, kind=T.CLASSIFICATION, training=True, labeled=True, max_seq_length=128, labels=("0", "1")):
    batch = R.RecordBatch(3, "f.tsv", 0, rows)
    tally = Tally()
    f = RowFeaturizer(
        spec, kind=kind, max_seq_length=max_seq_length, training=training, labeled=labeled, label_source="test"
    )
    return f(batch, list(labels), Layout({3: 100}, 1000), tally), tally


def test_ids_equal_the_pretraining_tokenizers_for_the_same_text(wiki_vocab):
    spec = load_tokenizer(str(wiki_vocab / "vocab.txt"))
    path = shared_path("tasks", "sst2", "dev.tsv")
    rows = list(
        TB.parse_table(
            path.read_text().split("\n"), str(path), 0, TB.TableLayout("tsv", True, "sentence", None, "label"), Tally()
        )
    )
    t, _ = featurize(spec, rows)
    # The pretraining tokenizer, one sentence per "document".
    batch = DocumentTokenizer(spec)([(str(i), [r.text_a]) for i, r in enumerate(rows)], Counter())
    bounds = np.concatenate(([0], np.cumsum(batch.sentence_lengths)))
    cls_, sep = spec.vocab.id("[CLS]"), spec.vocab.id("[SEP]")
    got = t.column(T.INPUT_IDS).to_pylist()
    assert len(got) == len(rows) == 872
    for i, ids in enumerate(got):
        assert ids == [cls_] + batch.ids[bounds[i] : bounds[i + 1]].tolist() + [sep]
    assert t.column(T.SEGMENT_A_LENGTH).to_pylist() == [len(x) for x in got]
    assert t.column(T.LABEL).to_pylist() == [int(r.label) for r in rows]
    assert t.column(T.ROW_ID).to_pylist() == [T.row_id(3, r.line) for r in rows]


def test_pairs_are_truncated_longest_first_and_segments_follow(demo_vocab):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    long_text, short_text = " ".join(["the value"] * 20), "a function"
    rows = [
        TB.TextRow(2, long_text, short_text, "1"),
        TB.TextRow(3, short_text, long_text, "0"),
        TB.TextRow(4, long_text, long_text, "1"),
        TB.TextRow(5, short_text, short_text, "0"),
    ]
    t, tally = featurize(spec, rows, max_seq_length=16)
    full_long, full_short = DocumentTokenizer(spec)(
        [("l", [long_text]), ("s", [short_text])], Counter()
    ).sentence_lengths
    assert full_long == 40 and full_short == 2
    cls_, sep = spec.vocab.id("[CLS]"), spec.vocab.id("[SEP]")
    ids, seg = t.column(T.INPUT_IDS).to_pylist(), t.column(T.SEGMENT_A_LENGTH).to_pylist()
    # 13 tokens for A + B: the longer text gives way; on a tie B gives the extra token.
    assert [(s - 2, len(x) - s - 1) for x, s in zip(ids, seg)] == [(11, 2), (2, 11), (7, 6), (2, 2)]
    for x, s in zip(ids, seg):
        assert x[0] == cls_ and x[s - 1] == sep and x[-1] == sep and x.count(sep) == 2
    a_full = DocumentTokenizer(spec)([("l", [long_text])], Counter()).ids.tolist()
    assert ids[0][1:12] == a_full[:11] and ids[2][1:8] == a_full[:7] and ids[2][9:15] == a_full[:6]
    assert tally.counts["rows_truncated"] == 3 and tally.counts["tokens_removed_by_truncation"] == 29 + 29 + 67


def test_labels_outside_a_fixed_set_drop_in_training_and_stop_evaluation(demo_vocab):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    rows = [TB.TextRow(2, "good", None, "1"), TB.TextRow(5, "odd", None, "2"), TB.TextRow(6, "\u200b", None, "0")]
    t, tally = featurize(spec, rows, training=True)
    assert t.column(T.LABEL).to_pylist() == [1]
    c = tally.counters()
    assert c["first_lines"]["rows_dropped.label_not_in_set"] == ["f.tsv:5"]
    assert c["first_lines"]["rows_dropped.no_tokens"] == ["f.tsv:6"]  # only a zero-width space
    assert c["rows_used"] == 1
    with pytest.raises(InputError, match=r"f.tsv:5: label '2' is not in the label set \['0', '1'\]"):
        featurize(spec, rows, training=False)


def test_unlabeled_rows_and_regression_labels(demo_vocab):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    t, _ = featurize(spec, [TB.TextRow(2, "a text", None, None)], labeled=False)
    assert t.column(T.LABEL).to_pylist() == [None]
    t, _ = featurize(spec, [TB.TextRow(2, "a text", "b text", "3.25")], kind=T.REGRESSION, labels=())
    assert t.column(T.LABEL).to_pylist() == [3.25] and str(t.schema.field(T.LABEL).type) == "float"


def test_literal_special_tokens_in_text_are_removed_as_in_pretraining(demo_vocab):
    spec = load_tokenizer(str(demo_vocab / "vocab.txt"))
    t, tally = featurize(spec, [TB.TextRow(2, "left [SEP] right", None, "0"), TB.TextRow(3, "left right", None, "0")])
    a, b = t.column(T.INPUT_IDS).to_pylist()
    assert a == b and a.count(spec.vocab.id("[SEP]")) == 1
    assert tally.counts["special_token_literals_removed"] == 1
