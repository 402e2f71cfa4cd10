"""One cap per record for every reader (issue 44 item 1): a line, a book, a row past ``MAX_RECORD_BYTES`` is
refused in one line naming the file, the record and the cap; records under it read as ever. Small caps here
(``monkeypatch``), never gigabytes. The dump reader's caps: ``test_mediawiki_xml.py``."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.read import file_ranges, read_documents
from bertstream.pipelines.tasks.read import file_lines

CAP = 100_000


@pytest.fixture(autouse=True)
def small_cap(monkeypatch) -> None:
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", CAP)


def read_all(path, fmt: str, range_bytes: int = 0) -> list:
    ranges = file_ranges(str(path), fmt, "f", path.stat().st_size, range_bytes)
    return [d for r in ranges for d in read_documents(str(path), fmt, Counter(), start=r.start, end=r.end)]


@pytest.mark.parametrize("range_bytes", [0, 50_000], ids=["whole", "ranges"])
@pytest.mark.parametrize("fmt", ["jsonl", "lines", "sentences"])
def test_a_line_past_the_cap_is_refused_naming_the_file_the_line_and_the_cap(tmp_path, fmt, range_bytes):
    short = json.dumps({"text": "A short line."}) + "\n"
    path = tmp_path / f"big.{fmt}"
    path.write_text(short * 10 + json.dumps({"text": "word " * (CAP // 4)}) + "\n" + short)
    with pytest.raises(
        InputError, match=rf"big\.{fmt}: the line at byte {len(short) * 10} holds more than {CAP} bytes"
    ):
        read_all(path, fmt, range_bytes)
    path.write_text(short * 10 + json.dumps({"text": "word " * (CAP // 6)}) + "\n" + short)
    assert len(read_all(path, fmt, range_bytes)) == (12 if fmt != "sentences" else 1)


def test_a_compressed_line_past_the_cap_is_refused(tmp_path):
    import gzip

    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress(json.dumps({"text": "word " * CAP}).encode()))
    with pytest.raises(InputError, match=rf"big\.jsonl\.gz: the line at byte 0 holds more than {CAP} bytes"):
        read_all(path, "jsonl")


def test_a_book_past_the_cap_is_refused_and_one_under_it_read(tmp_path):
    path = tmp_path / "book.txt"
    line = "It was the best of times, it was the worst of times.\n"
    path.write_text(line * (CAP // len(line) + 10))
    with pytest.raises(InputError, match=rf"book\.txt: the book '.*book\.txt' holds more than {CAP} bytes"):
        read_all(path, "text")
    path.write_text(line * (CAP // len(line) - 10))
    assert len(read_all(path, "text")) == 1


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_row_past_the_cap_is_refused_naming_the_file_the_row_and_the_cap(tmp_path, fmt):
    t = pa.table({"text": ["short text.", "x" * (CAP + 1), "after."]})
    path = tmp_path / f"big.{fmt}"
    if fmt == "parquet":
        pq.write_table(t, path, use_dictionary=False)
    else:
        with pa.ipc.new_stream(path, t.schema) as w:
            w.write_table(t)
    with pytest.raises(InputError, match=rf"big\.{fmt}: row 1's 'text' holds more than {CAP} bytes"):
        read_all(path, fmt)
    if fmt == "parquet":  # its dictionary holds the row: pyarrow would decode it whole, so it is refused unread
        pq.write_table(t, path)
        with pytest.raises(InputError, match=r"big\.parquet: the dictionary of 'text' in row group 0 holds more"):
            read_all(path, fmt)


def test_a_task_files_line_past_the_cap_is_refused(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("label\ttext\n" + "1\t" + "x" * (CAP + 1) + "\n")
    with pytest.raises(InputError, match=rf"train\.tsv: the line at byte 11 holds more than {CAP} bytes"):
        list(file_lines(str(path), Tally()))


@pytest.mark.parametrize(
    ("fmt", "head", "record"),
    [
        ("sentences", "A sentence.\n\n", "the document at byte 13"),
        ("wikiextractor", '<doc id="1">\nT\n', "the <doc> at byte 0"),
    ],
)
def test_a_document_of_many_lines_past_the_cap_is_refused(tmp_path, fmt, head, record):
    """A file of sentences without a blank line, or a <doc> never closed, is one document: it grew with the file."""
    path = tmp_path / f"big.{fmt}"
    path.write_text(head + "One more sentence of the document.\n" * (CAP // 30))
    with pytest.raises(InputError, match=rf"big\.{fmt}: {record} holds more than {CAP} bytes"):
        read_all(path, fmt)
    path.write_text(head + "One more sentence of the document.\n" * (CAP // 40))
    assert len(read_all(path, fmt)) == (2 if fmt == "sentences" else 1)
