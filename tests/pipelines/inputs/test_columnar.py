"""Parquet and Arrow inputs: units, columns read, and every bad file an InputError naming it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.columnar import datasets_folder_files, read_table, table_ranges
from bertstream.pipelines.inputs.resolve import resolve_inputs, unknown_prefix


def table(n: int = 100) -> pa.Table:
    return pa.table(
        {"url": [f"u{i}" for i in range(n)], "text": [f"Text {i}." for i in range(n)], "id": list(range(n))}
    )


def test_only_the_text_id_and_title_columns_are_read(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path, row_group_size=30)
    assert list(read_table(str(path), "parquet", "text"))[:2] == [(0, "0", "", "Text 0."), (1, "1", "", "Text 1.")]
    read = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *a, **kw):
        read.append(kw.get("columns"))
        return real(self, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    list(read_table(str(path), "parquet", "text"))
    assert read.count(["text", "id"]) == 4 and {c for r in read for c in r} == {"text", "id"}  # never url


def test_a_missing_text_column_names_the_columns_there_are(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path)
    with pytest.raises(InputError, match=r"t\.parquet has no column 'content' \(its columns: url, text, id\)"):
        table_ranges(str(path), "parquet", 1 << 20, "content")
    with pytest.raises(InputError, match=r"column 'id' holds int64, not text"):
        list(read_table(str(path), "parquet", "id"))


def test_a_corrupt_footer_or_a_file_that_is_no_table_is_an_input_error_naming_it(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path)
    data = path.read_bytes()
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(data[:-8] + b"\xff\xff\xff\x7fPAR1")  # the footer's length field corrupt
    for fmt, p in (("parquet", bad), ("parquet", tmp_path / "cut.parquet"), ("arrow", tmp_path / "no.arrow")):
        if p.name == "cut.parquet":
            p.write_bytes(data[: len(data) // 2])
        if p.name == "no.arrow":
            p.write_text("just text, no Arrow\n")
        with pytest.raises(InputError, match=p.name) as e:
            table_ranges(str(p), fmt, 1000, "text")
        assert "\n" not in str(e.value)


def _aborting_parquet(tmp_path) -> Path:
    """A Parquet file whose column metadata aborts pyarrow (the fuzz test's find), or a skip where it is gone."""
    from tests.fuzz import mutate

    rows = range(40)
    t = pa.table(
        {
            "id": [str(i) for i in rows],
            "title": [f"T{i % 3}" for i in rows],
            "text": [f"Row {i} of the table." for i in rows],
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(t, path, row_group_size=10)
    path.write_bytes(mutate(path.read_bytes(), 1378, path.stat().st_size))
    probe = f"import pyarrow.parquet as pq; m = pq.ParquetFile({str(path)!r}).metadata; m.row_group(1).column(1)"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != -6:
        pytest.skip(f"pyarrow {pa.__version__} reads this file's metadata without aborting: the case is gone")
    return path


def test_column_metadata_that_aborts_pyarrow_is_an_input_error_naming_the_file(tmp_path):
    # A longer fuzz run found Parquet files whose size statistics pyarrow checks in a call Python cannot catch:
    # `column()` aborted the process (exit 134, two lines of C++), the run's listing with it.
    path = _aborting_parquet(tmp_path)
    with pytest.raises(InputError, match=r"t.parquet: not a readable Parquet file \(its column metadata aborts "):
        table_ranges(str(path), "parquet", 1000, "text")
    # The forked child that aborts says nothing through a fault handler its parent enabled on a file of its own,
    # as pytest does (it printed "Fatal Python error: Aborted" and ~240 module names into the test output).
    fault_log = tmp_path / "faults.txt"
    check = (
        "import faulthandler, sys\n"
        f"faulthandler.enable(file=open({str(fault_log)!r}, 'w'))\n"
        "from bertstream.pipelines.common.files import InputError\n"
        "from bertstream.pipelines.inputs.columnar import table_ranges\n"
        "try:\n"
        f"    table_ranges({str(path)!r}, 'parquet', 1000, 'text')\n"
        "except InputError:\n"
        "    print('refused')\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "refused", done.stderr[-2000:]
    assert "Fatal Python error" not in fault_log.read_text() + done.stderr


# The check's forked child dies of the process's own fork handler (as gRPC's aborted it in a Beam worker process
# whose channels were busy: one valid file in five refused with multi_processing), or never returns from it.
FORK_FAILS = {
    "aborts": "os.register_at_fork(after_in_child=os.abort)",
    "hangs": "P.FORK_DEADLINE_S = 1.0\nos.register_at_fork(after_in_child=lambda: time.sleep(3600))",
}


@pytest.mark.parametrize("how", sorted(FORK_FAILS))
def test_a_fork_that_fails_in_the_child_for_the_process_s_reason_neither_refuses_nor_passes_the_file(tmp_path, how):
    good = tmp_path / "good.parquet"
    pq.write_table(table(), good, row_group_size=30)
    bad = _aborting_parquet(tmp_path)
    script = (
        "import os, sys, time\n"
        "import bertstream.pipelines.inputs.parquet_batches as P\n"
        "from bertstream.pipelines.common.files import InputError\n"
        "from bertstream.pipelines.inputs.columnar import table_ranges\n"
        f"{FORK_FAILS[how]}\n"
        f"print(len(table_ranges({str(good)!r}, 'parquet', 1000, 'text')))\n"
        "try:\n"
        f"    table_ranges({str(bad)!r}, 'parquet', 1000, 'text')\n"
        "except InputError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr[-2000:]
    assert int(lines[0]) >= 1  # the valid file read (it was "not a readable Parquet file ... signal 6")
    assert re.search(r"t\.parquet: not a readable Parquet file \(its column metadata aborts", lines[1])


def test_column_names_that_are_no_utf8_are_an_input_error_naming_the_file(tmp_path):
    path = tmp_path / "names.arrow"  # (found by a longer fuzz: a traceback from table_ranges)
    t = pa.table({"text": ["a"], "titlé": ["b"]})
    with pa.ipc.new_stream(str(path), t.schema) as w:
        w.write_table(t)
    path.write_bytes(path.read_bytes().replace("titlé".encode(), b"titl\xff\xfe"))
    with pytest.raises(InputError, match=r"names\.arrow: not a readable Arrow IPC file or stream \(UnicodeDecodeError"):
        table_ranges(str(path), "arrow", 0, "text")


def test_a_save_to_disk_folder_stands_for_its_arrow_files_in_order(tmp_path):
    ds = datasets.Dataset.from_dict({"text": [f"Row {i}." for i in range(500)]})
    ds.save_to_disk(str(tmp_path / "saved"), max_shard_size="2KB")
    state = json.loads((tmp_path / "saved" / "state.json").read_text())
    expected = [str(tmp_path / "saved" / f["filename"]) for f in state["_data_files"]]
    assert len(expected) > 1 and datasets_folder_files(str(tmp_path / "saved")) == expected
    files = resolve_inputs([f"arrow:{tmp_path / 'saved'}"])
    assert [f.path for f in files] == sorted(expected) and {f.format for f in files} == {"arrow"}
    texts = [r[3] for f in files for r in read_table(f.path, "arrow", "text")]
    assert texts == [f"Row {i}." for i in range(500)]


def test_a_dataset_dict_folder_asks_for_one_split(tmp_path):
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"text": ["a"]}), "test": datasets.Dataset.from_dict({"text": ["b"]})}
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(
        UsageError, match=r"DatasetDict folder \(splits: train, test\): give one split, e.g. arrow:.*dd/train"
    ):
        resolve_inputs([f"arrow:{tmp_path / 'dd'}"])


def _saved_folder(tmp_path, names) -> str:
    """A save_to_disk folder of one Arrow file whose state.json names ``names``."""
    folder = tmp_path / "saved"
    folder.mkdir(parents=True)
    with pa.ipc.new_stream(str(folder / "data-00000-of-00001.arrow"), table(3).schema) as w:
        w.write_table(table(3))
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names]}))
    return str(folder)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../outside.arrow", "leaves the folder"),  # read before: a table beside the folder
        ("/etc/passwd", "leaves the folder"),  # opened before: its first bytes in the error
        ("**", "is missing"),  # walked before: every file below the folder, as Arrow
        ("link.arrow", "a link out of the folder"),
        ("sub", "not a regular file"),
        (5, "expected a string"),
    ],
)
def test_a_state_json_names_only_regular_files_inside_its_folder(tmp_path, name, why):
    with pa.ipc.new_stream(str(tmp_path / "outside.arrow"), table(3).schema) as w:
        w.write_table(table(3))
    folder = _saved_folder(tmp_path, ["data-00000-of-00001.arrow", name])
    (tmp_path / "saved" / "link.arrow").symlink_to(tmp_path / "outside.arrow")
    (tmp_path / "saved" / "sub").mkdir()
    (tmp_path / "saved" / "sub" / "x.arrow").write_bytes((tmp_path / "outside.arrow").read_bytes())
    with pytest.raises(UsageError, match=why) as e:
        resolve_inputs([f"arrow:{folder}"])
    assert "state.json" in str(e.value) and "root:" not in str(e.value)
    assert [f.name for f in resolve_inputs([f"arrow:{_saved_folder(tmp_path / 'ok', ['data-00000-of-00001.arrow'])}"])]


def test_an_unknown_format_prefix_names_the_formats_and_a_url_is_no_prefix(tmp_path):
    with pytest.raises(UsageError, match=r"unknown input format 'parket' \(the formats: sentences, .*parquet, arrow\)"):
        resolve_inputs([f"parket:{tmp_path}/x.parquet"])
    odd = tmp_path / "notes:2024.txt"  # a file whose name has a colon is read as it is
    odd.write_text("x\n")
    assert [f.path for f in resolve_inputs([str(odd)])] == [str(odd)]
    assert unknown_prefix("gs://bucket/wiki.parquet") is None and unknown_prefix("s3://b/x") is None
    with pytest.raises(UsageError, match="matches no files"):
        resolve_inputs([f"{tmp_path}/none:*.txt"])


# --- Memory bounded by the cap (issue 44): what pyarrow is asked to decode at once, from the file's metadata.
CAP = 100_000


def batches_read(monkeypatch) -> list[tuple[int, int]]:
    """``(batch_size asked, bytes of each batch yielded)`` of every Parquet batch read from now on."""
    seen: list[tuple[int, int]] = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *a, **kw):
        for batch in real(self, *a, **kw):
            if not pa.types.is_dictionary(batch.schema.field(0).type):  # (not the probe of a dictionary's values)
                seen.append((kw["batch_size"], batch.nbytes))
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    return seen


@pytest.mark.parametrize("dictionary", [False, True], ids=["plain", "one-value-in-every-row"])
def test_a_parquet_file_of_large_rows_is_decoded_in_batches_within_the_cap(tmp_path, monkeypatch, dictionary):
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", CAP)
    path = tmp_path / "t.parquet"
    # Plain: 300 rows of 10 KB, 3 MB a row group. A dictionary: one 20 KB text in every row, a few KB as stored
    # (its rows would decode to 6 MB at once): the dictionary page bounds a row.
    texts = ["Text of the book. " * 1100 if dictionary else f"{i:05d} " + "word " * 2000 for i in range(300)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=300, use_dictionary=dictionary)
    stored = pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size
    assert (stored < 100_000) if dictionary else (stored > 3_000_000)
    seen = batches_read(monkeypatch)
    assert [r[3] for r in read_table(str(path), "parquet", "text")] == texts
    assert 1 < seen[0][0] < 10 and sum(1 for _ in seen) >= 30
    assert max(nbytes for _, nbytes in seen) <= CAP


def test_a_parquet_row_group_whose_metadata_proves_a_row_past_the_cap_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", CAP)
    path = tmp_path / "big.parquet"
    t = pa.table({"text": ["A short text."] * 4 + [f"{i} " + "x" * 150_000 for i in range(2)]})
    pq.write_table(t, path, row_group_size=4, use_dictionary=False)  # row group 1: 2 rows of 150 KB
    seen = batches_read(monkeypatch)
    with pytest.raises(InputError) as e:
        list(read_table(str(path), "parquet", "text"))
    assert re.fullmatch(
        rf"cannot read {re.escape(str(path))}: a row of row group 1 \(2 rows of 300\d{{3}} bytes in 'text'\) "
        rf"holds more than {CAP} bytes, the cap on one record \(MAX_RECORD_BYTES\): .*",
        str(e.value),
    )
    assert "\n" not in str(e.value) and len(seen) == 1  # row group 0 read, row group 1 never decoded


def test_a_mapped_arrow_batch_past_the_cap_is_read_a_slice_of_rows_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", CAP)
    path = tmp_path / "t.arrow"
    t = pa.table({"text": [f"{i:05d} " + "word " * 2000 for i in range(100)]})  # one batch of 1 MB, 10 KB a row
    with pa.ipc.new_stream(str(path), t.schema) as w:
        w.write_table(t)
    list(read_table(str(path), "arrow", "text"))  # (pyarrow's first use allocates for itself)
    tracemalloc.start()
    try:
        n = sum(1 for _ in read_table(str(path), "arrow", "text"))
        peak = tracemalloc.get_traced_memory()[1]  # Python's allocations: the texts turned to str at once
    finally:
        tracemalloc.stop()
    assert n == 100 and peak < 3 * CAP
