"""The device scale-out benchmark (issue 47) on this machine: its smoke run writes the JSON a device run writes,
with real figures and byte-identical shards across runners; what it carries is bertprep's requirements minus the
device image's packages."""

from __future__ import annotations

import importlib.metadata as md
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.lib.device_carry import on_the_image
from benchmarks.scale_out import NOT_IMPORTED, Plan, carried_pins, planned_s
from tests.conftest import REPO, shared_path


def _real(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.mark.slow
@pytest.mark.shared_data
def test_smoke_writes_real_figures_and_identical_shards(tmp_path: Path) -> None:
    shared_path("pretrain", "wikidump")
    out = tmp_path / "smoke.json"
    run = [sys.executable, "benchmarks/scale_out.py", "--smoke", "--json", str(out)]
    proc = subprocess.run(run, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result) == {"machine", "plan", "rows", "dump", "skipped", "summary"}
    assert result["skipped"] == [] and result["machine"]["smoke"] is True
    rows = result["rows"]
    # one worker (in-process) and 2 worker processes: one row each, all measured (Dask: --dask 2, not here)
    assert sorted((r["runner"], r["workers"]) for r in rows) == [("in-process", 1), ("multi-proc", 2)]
    for r in rows:
        for key in ("seconds", "input_mb", "mb_per_s", "cpu_s", "cpu_s_per_mb", "peak_mb", "instances", "cpu_ratio"):
            assert _real(r[key]), (key, r)
    # every runner wrote the same shards, byte for byte (sha256 of each shard)
    assert len({r["shards_digest"] for r in rows}) == 1 and all(r["same_shards_as_in_process"] for r in rows)
    summary = result["summary"]["dupe 1"]
    assert summary["identical_shards"] is True and summary["rows"] == 2
    assert _real(summary["multi-proc 2"]["speedup"]) and _real(summary["multi-proc 2"]["cpu_ratio"])
    # the goals judged at the most workers of the run (no Dask row here): speed-up and CPU ratio
    assert [g.split(" (")[0].rsplit(" ", 1)[0] for g in summary["goals"]] == [
        "multi-proc 2 speedup",
        "multi-proc 2 cpu_ratio",
    ]
    dump = result["dump"]
    assert dump["files"] == 2 and dump["workers"] == 2 and dump["extract"]["documents"] > 0
    assert dump["xml_mb"] > 3 * dump["bz2_mb"]  # the dump's XML, not its bzip2 bytes
    for stage in ("extract", "pretraining"):
        assert all(_real(v) for v in dump["rates"][stage].values()), dump["rates"]


def test_carried_wheels_are_bertprep_needs_less_the_device_image() -> None:
    pins = carried_pins()
    assert {"apache-beam", "dask", "distributed", "nanotoken", "webdataset", "zstandard"} <= set(pins)
    assert not set(pins) & (on_the_image() | NOT_IMPORTED) and {"torch", "numba", "pyarrow"} <= on_the_image()
    # the versions the tests run with
    assert all(md.version(name) == version for name, version in pins.items())
    # Beam's own requirements come along (the device has no package index to fetch them from)
    assert {"fastavro", "pymongo", "cloudpickle", "protobuf"} <= set(pins)


def test_a_row_planned_past_the_deadline_is_skipped_and_listed() -> None:
    saved = []
    plan = Plan(deadline_s=30, out=lambda: saved.append(1))
    # 500 MB at 0.1 CPU-s/MB: 50 s on one worker, ~3 s on 16 (plus 5 s of start each); 30 s left
    assert planned_s(0.1, 500, 1, 16, False) > 50 > planned_s(0.1, 500, 16, 16, False)
    assert plan.fits("16 workers", planned_s(0.1, 500, 16, 16, False))
    assert not plan.fits("1 worker", planned_s(0.1, 500, 1, 16, False))
    assert [s["row"] for s in plan.skipped] == ["1 worker"] and saved == [1]
