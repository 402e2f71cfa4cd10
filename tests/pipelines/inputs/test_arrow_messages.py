"""An Arrow IPC stream's messages read from their metadata (issue 44): rows counted without reading a body, as
pyarrow counts them, on real text (a ``datasets`` save_to_disk folder, IPC streams and files, compressed, with
dictionaries); a batch held in memory past the cap, or one whose metadata does not fit the file, is refused in one
line naming the file and the message's byte before its body is read."""

from __future__ import annotations

import re
from collections import Counter

import datasets
import pyarrow as pa
import pytest

from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs import columnar, limits
from bertstream.pipelines.inputs.arrow_messages import DICTIONARY, RECORD_BATCH, SCHEMA, heads
from bertstream.pipelines.inputs.columnar import read_table, table_ranges
from tests.conftest import shared_path

CAP = 100_000


@pytest.fixture(scope="module")
def articles() -> pa.Table:
    """The shared Wikipedia articles (WikiExtractor output) as a table: id, title, text."""
    raw = shared_path("pretrain", "wikipedia", "wiki_00").read_text(encoding="utf-8")
    docs = re.findall(r'<doc id="(\d+)" url="[^"]*" title="([^"]*)">\n(.*?)</doc>', raw, flags=re.S)
    assert len(docs) > 30
    return pa.table({"id": [d[0] for d in docs], "title": [d[1] for d in docs], "text": [d[2] for d in docs]})


def write(path, t: pa.Table, kind: str, rows: int, **options) -> None:
    writer = pa.ipc.new_stream if kind == "stream" else pa.ipc.new_file
    with writer(str(path), t.schema, options=pa.ipc.IpcWriteOptions(**options)) as w:
        for batch in t.to_batches(max_chunksize=rows):
            w.write_batch(batch)


def pyarrow_rows(path) -> list[int]:
    with pa.memory_map(str(path)) as f:
        if f.read(6) == b"ARROW1":
            reader = pa.ipc.open_file(f)
            return [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        f.seek(0)
        return [b.num_rows for b in pa.ipc.open_stream(f)]


@pytest.mark.parametrize(
    ("kind", "options"),
    [("stream", {}), ("file", {}), ("stream", {"compression": "zstd"}), ("file", {"compression": "lz4"})],
)
def test_rows_are_counted_from_the_metadata_as_pyarrow_counts_them_without_reading_a_body(
    tmp_path, monkeypatch, articles, kind, options
):
    path = tmp_path / "wiki.arrow"
    write(path, articles, kind, 7, **options)
    read: list = []
    monkeypatch.setattr(pa.ipc, "read_record_batch", lambda *a, **k: read.append(a))  # no batch is read
    ranges = table_ranges(str(path), "arrow", 1, "text")  # every batch a range
    expected = pyarrow_rows(path)
    assert len(expected) > 5 and not read
    assert [r[2] for r in ranges] == [sum(expected[:k]) for k in range(len(expected))]
    monkeypatch.undo()
    texts = [r[3] for start, end, row in ranges for r in read_table(str(path), "arrow", "text", start, end, row)]
    assert texts == articles.column("text").to_pylist()


def test_a_datasets_folder_and_a_stream_with_dictionaries_are_counted_as_pyarrow_counts_them(tmp_path, articles):
    folder = tmp_path / "saved"
    datasets.Dataset(articles).save_to_disk(str(folder), max_shard_size="200KB")
    files = sorted(folder.glob("*.arrow"))
    assert len(files) > 1
    for f in files:
        with pa.memory_map(str(f)) as source:
            found = [h.rows for h in heads(source, 0, source.size(), str(f)) if h.kind == RECORD_BATCH]
        assert found == pyarrow_rows(f)
    coded = articles.set_column(1, "title", articles.column("title").dictionary_encode())
    path = tmp_path / "dict.arrow"
    write(path, coded, "stream", 9)
    with pa.memory_map(str(path)) as source:
        kinds = [(h.kind, h.rows) for h in heads(source, 0, source.size(), str(path))]
    assert kinds[0] == (SCHEMA, 0) and kinds[1][0] == DICTIONARY
    assert [n for k, n in kinds if k == RECORD_BATCH] == pyarrow_rows(path)
    assert [r[3] for r in read_table(str(path), "arrow", "text")] == articles.column("text").to_pylist()


def big_batches(path, kind: str, **options) -> list[int]:
    """An Arrow file of 3 batches of 20 rows of 10 KB (200 KB a batch, past CAP): the batches' bytes."""
    t = pa.table({"text": [f"{i:05d} " + "word " * 2000 for i in range(60)]})
    write(path, t, kind, 20, **options)
    with pa.memory_map(str(path)) as source:
        start = 8 if kind == "file" else 0
        return [h.offset for h in heads(source, start, source.size(), str(path)) if h.kind == RECORD_BATCH]


@pytest.mark.parametrize("kind", ["stream", "file"])
def test_a_batch_that_would_be_held_past_the_cap_is_refused_before_its_body_is_read(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", CAP)
    path = tmp_path / "big.arrow"
    first = big_batches(path, kind)[0]

    class Reads:  # a URL's file (what columnar opens through Beam's filesystems): bodies would be read, not mapped
        def __init__(self) -> None:
            self.f, self.most = open(path, "rb"), 0

        def read(self, n: int = -1) -> bytes:
            self.most = max(self.most, n)
            return self.f.read(n)

        def __getattr__(self, name: str):
            return getattr(self.f, name)

    raw = Reads()
    with pytest.raises(InputError) as e, pa.PythonFile(raw, mode="r") as source:
        columnar._arrow_units(source, str(path), "text")
    assert str(e.value).startswith(
        f"cannot read {path}: the batch at byte {first} holds more than {CAP} bytes, the cap on one record"
    )
    assert raw.most < CAP and "\n" not in str(e.value)  # the metadata read, not the body
    # Mapped from a local disk, the same file is read: its bodies are never copied, its rows turned a slice at a time.
    assert len(list(read_table(str(path), "arrow", "text"))) == 60
    # Compressed, its batches are unpacked whole: refused, local or not.
    big_batches(path, kind, compression="zstd")
    assert path.stat().st_size < CAP
    with pytest.raises(InputError, match=rf"the batch at byte \d+ holds more than {CAP} bytes"):
        table_ranges(str(path), "arrow", 0, "text")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d, at: d[: at + 4] + (1 << 30).to_bytes(4, "little") + d[at + 8 :], "metadata length 1073741824"),
        (lambda d, at: d[: len(d) - 100], "does not fit the file"),  # the last batch's body cut short
    ],
    ids=["metadata-length", "cut-body"],
)
def test_a_message_whose_sizes_do_not_fit_the_file_is_refused_naming_its_byte(tmp_path, change, why):
    path = tmp_path / "t.arrow"
    t = pa.table({"text": [f"Row {i}." for i in range(100)]})
    write(path, t, "stream", 10)
    with pa.memory_map(str(path)) as source:
        at = [h.offset for h in heads(source, 0, source.size(), str(path))][3]
    path.write_bytes(change(path.read_bytes(), at))
    with pytest.raises(
        InputError, match=rf"t\.arrow: not a readable Arrow IPC file or stream \(the message at byte \d+: .*{why}"
    ):
        list(columnar.Table("arrow").read(str(path), "t", Counter(), "text", 0, None, 0))
