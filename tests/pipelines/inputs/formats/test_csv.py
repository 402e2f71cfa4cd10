"""The ``csv`` input format: a table, a document per row, read by the reader the task tables share."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs.formats import csv as F
from bertstream.pipelines.inputs.read import read_documents
from bertstream.pipelines.inputs.resolve import resolve_inputs
from tests.conftest import shared_path


def _read(path: Path, text_field: str) -> tuple[list, Counter]:
    counters: Counter = Counter()
    listed = (path.stat().st_size, path.stat().st_mtime)
    fmt = resolve_inputs([str(path)], "auto")[0].format
    docs = list(read_documents(str(path), fmt, counters, True, path.name, 0, None, listed, text_field))
    return docs, counters


def test_chnsenticorp_tsv_under_auto_is_a_document_a_row_its_quotes_kept():
    # Real data: 9,600 labelled reviews; 3 open with '"', which a CSV reader with default quoting merges
    # (9,146 rows): a .tsv is read without quoting, as the task tables read it.
    path = shared_path("tasks", "chnsenticorp", "train.tsv")
    docs, counters = _read(path, "text_a")
    assert len(docs) == counters[C.DOCUMENTS_READ] == 9600 and not C.dropped(counters)
    assert docs[0].doc_id == "train.tsv:13"  # the byte offset of its row, after the header 'label\ttext_a\n'
    assert docs[0].paragraphs[0].startswith("选择珠江花园的原因就是方便")
    assert sum(d.paragraphs[0].startswith('"') for d in docs) == 3


def test_a_csv_row_may_span_lines_and_a_bad_row_is_a_counted_drop(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text('id,title,text\n1,A,"First, quoted.\nSecond paragraph."\n2,B\n3,C,"never closes\n4,D,Last one.\n')
    docs, counters = _read(p, "text")
    assert [(d.source_id, d.title, d.paragraphs) for d in docs] == [
        ("1", "A", ["First, quoted.", "Second paragraph."]),
        ("4", "D", ["Last one."]),
    ]
    assert [d.doc_id for d in docs] == ["t.csv:14", f"t.csv:{p.read_text().index('4,D')}"]
    assert C.dropped(counters) == {C.WRONG_COLUMN_COUNT: 1, C.UNBALANCED_QUOTE: 1}
    assert counters[C.DOCUMENTS_READ] == 4


def test_a_header_without_the_text_column_is_refused_naming_it(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("sentence,label\nSome text.,1\n")
    with pytest.raises(InputError, match=r"t\.csv: its header \['sentence', 'label'\] has no column 'text'"):
        _read(p, "text")


def test_it_claims_the_table_endings_and_never_a_sample():
    assert F.ENDINGS == (".csv", ".tsv") and F.SPLITS is False
    assert F.detect(F.Sample(b"a,b,c\n1,2,3\n")) is None
