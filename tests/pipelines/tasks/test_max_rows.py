"""``bertprep task --max-rows N``: only the split's first N records (in input order: the files in order, each
from its start), the rest counted as beyond --max-rows (not dropped), in the manifest and the summary."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner

from bertstream.cli.errors import UsageError
from bertstream.pipelines.cli import main
from bertstream.pipelines.tasks.read import clip_counts
from bertstream.schemas.tasks import split_row_id
from tests.conftest import shared_path
from tests.jobs import run_classification


def _labels(lines: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in lines:
        label = line.rsplit("\t", 1)[1].strip()
        out[label] = out.get(label, 0) + 1
    return out


def test_max_rows_keeps_the_first_rows_across_files_and_counts_the_rest(tmp_path, wiki_vocab):
    header, *lines = shared_path("tasks", "sst2", "dev.tsv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "dev_a.tsv").write_text("\n".join([header, *lines[:50]]) + "\n", encoding="utf-8")
    (tmp_path / "dev_b.tsv").write_text("\n".join([header, *lines[50:120]]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["task", "classification", "--glue", "sst2", "--input", str(tmp_path / "dev_a.tsv"), "--input"]
    args += [str(tmp_path / "dev_b.tsv"), "--vocab", str(wiki_vocab / "vocab.txt"), "--output", str(out)]
    r = CliRunner().invoke(main, [*args, "--max-rows", "70"])
    assert r.exit_code == 0, r.output
    assert "rows: 120 read, 50 beyond --max-rows 70, 70 used, 0 dropped" in r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["task"]["max_rows"] == 70 and m["totals"]["rows"] == 70
    assert m["counters"]["rows_beyond_max_rows"] == 50 and m["counters"]["rows_read"] == 120
    assert not any(k.startswith("rows_dropped") for k in m["counters"])  # left out, not dropped
    # the first file whole and the second's first 20 rows: their labels, and their (file, line) in the row ids
    assert m["statistics"]["label_counts"] == _labels(lines[:70])
    rows = pa.concat_tables(pa.ipc.open_file(out / s["path"]).read_all() for s in m["shards"])
    places = [(split_row_id(r)[0], split_row_id(r)[1]) for r in rows.column("row_id").to_pylist()]
    assert places == [(0, line) for line in range(2, 52)] + [(1, line) for line in range(2, 22)]
    # without the flag: every row, and no max_rows in the manifest
    r = CliRunner().invoke(main, [*args, "--overwrite"])
    assert r.exit_code == 0 and "rows: 120 read, 120 used, 0 dropped" in r.output
    assert "max_rows" not in json.loads((out / "manifest.json").read_text())["task"]


def test_max_rows_larger_than_the_split_keeps_all(tmp_path, wiki_vocab):
    result = run_classification(
        inputs=[str(shared_path("tasks", "mrpc", "dev.tsv"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(tmp_path / "out"),
        glue="mrpc",
        max_rows=10_000,
    )
    c = result.manifest.counters
    assert (c["rows_read"], c["rows_used"], c.get("rows_beyond_max_rows", 0)) == (408, 408, 0)


def test_clip_counts_and_a_negative_limit():
    assert clip_counts([(1, 30), (0, 50)], 70) == [(0, 50), (1, 20)]
    assert clip_counts([(0, 5), (1, 5)], 3) == [(0, 3), (1, 0)]
    with pytest.raises(UsageError, match="max_rows: must be >= 0, got -1"):
        from bertstream.cli import options
        from bertstream.pipelines.tasks.classification import ClassificationJob

        options.build(ClassificationJob, inputs=("x",), vocab="v", output="o", max_rows=-1)
