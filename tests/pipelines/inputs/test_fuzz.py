"""Fuzz tests of the binary input readers (issue 44): a dump (bzip2, gzip, plain XML), a Parquet file, an Arrow
stream and file, a ``save_to_disk`` folder, each with a few bytes changed (seeded: the same cases every run).
Each case reads to its end or stops with one ``InputError`` line (a ``UsageError`` for a folder's state.json):
never another exception, never a hang, memory under the record cap."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.formats import format_module
from bertstream.pipelines.inputs.resolve import resolve_inputs
from tests.fuzz import mutate
from tests.pipelines.inputs.dump_files import export, multistream, page

CASES = 120


@pytest.fixture(autouse=True)
def small_cap(monkeypatch) -> None:
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 1 << 20)


def read_whole(path: Path, fmt: str) -> int:
    """Documents of every range of ``path`` (a range size that splits it), or InputError."""
    module = format_module(fmt)
    size = path.stat().st_size
    n = 0
    for start, end, row in module.ranges(str(path), size, 200, "text"):
        n += sum(1 for _ in module.read(str(path), "f", Counter(), "text", start, end, row))
    return n


def fuzz(path: Path, data: bytes, fmt: str, region: int | None = None) -> int:
    """Read ``CASES`` mutations of ``data``: how many read to their end (the rest refused, one line)."""
    read = 0
    for seed in range(CASES):
        path.write_bytes(mutate(data, seed, region or len(data)))
        try:
            read_whole(path, fmt)
            read += 1
        except InputError as e:
            assert "\n" not in str(e) and path.name in str(e), e
    return read


def dump_xml() -> bytes:
    body = "".join(
        page(f"Page {i}", i + 1, f"<revision><text>Text of page {i}. '''Bold''' [[link]].</text></revision>")
        for i in range(12)
    )
    siteinfo = '<siteinfo><namespaces><namespace key="14">Category</namespace></namespaces></siteinfo>\n'
    return export(body, '<?xml version="1.0" encoding="UTF-8"?>\n', siteinfo).encode()


@pytest.mark.parametrize("kind", ["multistream", "gzip", "plain"])
def test_a_dump_with_bytes_changed_reads_or_is_refused_in_one_line(tmp_path, kind):
    xml = dump_xml()
    data = {"multistream": lambda: multistream(xml, 3)[0], "gzip": lambda: gzip.compress(xml), "plain": lambda: xml}
    path = tmp_path / f"dump.xml.{kind}"
    good = data[kind]()
    path.write_bytes(good)
    assert read_whole(path, "mediawiki") == 12
    fuzz(path, good, "mediawiki")


def table() -> pa.Table:
    return pa.table({"id": [str(i) for i in range(40)], "text": [f"Row {i} of the table." for i in range(40)]})


def test_a_parquet_file_with_bytes_changed_reads_or_is_refused_in_one_line(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path, row_group_size=10)
    assert read_whole(path, "parquet") == 40
    fuzz(path, path.read_bytes(), "parquet")


@pytest.mark.parametrize("kind", ["stream", "file"])
def test_an_arrow_table_with_bytes_changed_reads_or_is_refused_in_one_line(tmp_path, kind):
    path = tmp_path / "t.arrow"
    t = table()
    writer = pa.ipc.new_stream if kind == "stream" else pa.ipc.new_file
    with writer(str(path), t.schema) as w:
        for batch in t.to_batches(max_chunksize=10):
            w.write_batch(batch)
    assert read_whole(path, "arrow") == 40
    fuzz(path, path.read_bytes(), "arrow")


def test_a_datasets_folder_with_bytes_changed_reads_or_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": [f"Row {i}." for i in range(60)]}).save_to_disk(str(folder))
    state = folder / "state.json"
    good_state = state.read_bytes()
    arrow = next(folder.glob("*.arrow"))
    good_arrow = arrow.read_bytes()
    for seed in range(CASES // 2):
        state.write_bytes(mutate(good_state, seed, len(good_state)))
        arrow.write_bytes(mutate(good_arrow, seed, len(good_arrow)) if seed % 2 else good_arrow)
        try:
            for f in resolve_inputs([f"arrow:{folder}"]):
                read_whole(Path(f.path), "arrow")
        except (InputError, UsageError) as e:
            assert "\n" not in str(e), e
    state.write_bytes(good_state)
    arrow.write_bytes(good_arrow)
    assert json.loads(state.read_text())["_data_files"]
