"""The GPU suite's CPU rehearsal (``benchmarks/gpu_suite.py --smoke``): every part runs on a tiny model over
real shards and SST-2 rows made from the shared data, and the JSON holds real figures. Slow: it prepares the
data with bertprep and starts four berttrain commands (~25 CPU-seconds, one run for the whole module)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import gpu_suite as S
from benchmarks.lib import gpu_commands as C
from tests.conftest import shared_path


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    shared_path("pretrain", "wikipedia")
    out = tmp_path_factory.mktemp("gpu_suite")
    S.main(["--smoke", "--json", str(out / "suite.json"), "--logs", str(out / "logs")])
    return json.loads((out / "suite.json").read_text())


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_every_part_has_real_figures(smoke: dict) -> None:
    assert smoke["device"].startswith("cpu") and smoke["torch"] and smoke["transformers"]
    assert _finite(smoke["peaks_tflops"]["matmul"])
    for part in ("a", "b"):
        runs = [r for r in smoke[part]["runs"] if "skipped" not in r]
        assert {r["seq_len"] for r in runs} == {s[0] for s in S.SMOKE.shapes}, part
        for r in runs:
            assert r["finite"] and _finite(r["first_loss"]) and _finite(r["seq_per_s"]), r
            assert r["mfu_spec"] is None and _finite(r["mfu_matmul"]), r  # a CPU has no listed bf16 peak
    assert all(_finite(r["ours_over_theirs_time"]) for r in smoke["b"]["runs"])
    pad = smoke["a"]["padding_ms_per_step"]
    assert 0 < pad["real_token_share"] < 1 and _finite(pad["mask_cost"])
    assert any("scaled_dot_product" in op for op in smoke["a"]["attention"]["dispatched_with_mask"])


@pytest.mark.slow
def test_hugging_face_from_the_same_weights_gives_the_same_loss(smoke: dict) -> None:
    eq = smoke["b"]["equal_loss"]
    assert eq["initial_gap"] < 1e-2 and eq["within_tolerance"], eq
    assert len(eq["ours_steps"]) == len(eq["theirs_steps"]) == S.SMOKE.equal_steps
    # The steps moved both models (by far more than their gap): the comparison is not of two idle models.
    assert abs(eq["ours_after"] - eq["ours_initial"]) > 10 * max(eq["gap_after"], 1e-4), eq


@pytest.mark.slow
def test_the_real_commands_ran(smoke: dict) -> None:
    runs = smoke["c"]["runs"]
    assert [r["masking"] for r in runs] == ["static", "dynamic"]
    for r in runs:
        assert r["exit"] == 0 and _finite(r["seq_per_s"]) and _finite(r["over_step"]), r
        assert r["last_step"] == S.SMOKE.pretrain_steps
    d = smoke["d"]["summary"]
    for p in ("bf16", "fp32"):
        assert 0.3 < d[p]["mean_accuracy"] <= 1 and _finite(d[p]["command_seq_per_s"]), d
    assert isinstance(d["within_spread"], bool)


@pytest.mark.slow
def test_the_rows_of_issue_52_have_real_figures(smoke: dict) -> None:
    runs = [r for r in smoke["a"]["runs"] if "skipped" not in r]
    lamb = [r for r in runs if r["optimizer"] == "lamb"]
    eager = [r for r in runs if (r["seq_len"], r["batch"], r["masked"]) in S.SMOKE.eager_shapes and not r["compiled"]]
    assert lamb and eager and all(r["finite"] and _finite(r["seq_per_s"]) for r in lamb + eager)
    stall = smoke["e"]["checkpoint"]
    assert stall["preset"] == S.SMOKE.preset and _finite(stall["checkpoint_mib"]) and _finite(stall["sync_stall_s"])
    assert all(isinstance(stall[k], float) for k in ("async_stall_s", "async_call_s", "sync_over_async"))
    reads = smoke["e"]["host_reads"]
    assert reads["steps"] == list(S.SMOKE.reads_steps) and reads["cuda_syncs"] is None  # no CUDA here
    assert reads["host_reads"] >= reads["project_reads"] >= 0 and reads["device_reads"] == 0  # no device here
    lines = list(S.table(smoke))
    assert any(line.startswith("e: checkpoint of tiny") for line in lines)
    assert any(line.startswith("e: per non-logging step") for line in lines)


@pytest.mark.slow
def test_the_commands_need_nothing_the_device_lacks(smoke: dict) -> None:
    # The commands above ran (exit 0) with only the device image's distributions and the carried wheels
    # importable (benchmarks/lib/device_python.py): what they imported is within that set.
    imports = smoke["imports"]
    assert {"torch", "pyarrow"} <= set(imports["imported_distributions"])
    assert set(imports["needed_beyond_image"]) <= set(imports["carried"]), imports


def test_importtime_lines_give_top_level_modules() -> None:
    err = "import time: self [us] | cumulative | imported package\nimport time:  12 |  40 |   webdataset.cache\n"
    assert C.imported_modules(err + "other line\n") == {"webdataset"}


def test_precision_summary_compares_the_means_with_the_seeds_spread() -> None:
    runs = [
        {"precision": "bf16", "seed": 1, "dev_accuracy": 0.80, "command_seq_per_s": 300.0},
        {"precision": "bf16", "seed": 2, "dev_accuracy": 0.82, "command_seq_per_s": 100.0},
        {"precision": "fp32", "seed": 1, "dev_accuracy": 0.83, "command_seq_per_s": 100.0},
        {"precision": "fp32", "seed": 2, "skipped": "part d's time share spent"},
    ]
    s = C.precision_summary(runs, ("bf16", "fp32"))
    assert s["bf16"] == {"mean_accuracy": 0.81, "spread": 0.02, "seeds": 2, "command_seq_per_s": 200.0}
    assert s["fp32"]["seeds"] == 1 and s["accuracy_gap"] == 0.02 and s["within_spread"] and s["speedup"] == 2.0
    runs[0]["dev_accuracy"] = 0.78  # bf16 mean 0.80, spread 0.04: a gap of 0.03 is still within it
    assert C.precision_summary(runs, ("bf16", "fp32"))["within_spread"]
    runs[1]["dev_accuracy"] = 0.78  # bf16 0.78 +- 0: a gap of 0.05 is not
    assert not C.precision_summary(runs, ("bf16", "fp32"))["within_spread"]


def test_a_failed_part_is_reported_and_the_rest_still_printed() -> None:
    result = {
        "device": "X",
        "torch": "t",
        "peaks_tflops": {"spec": None, "matmul": 1.0, "matmul_n": 8},
        "a": {"error": "RuntimeError: boom"},
        "b": {
            "equal_loss": {
                "steps": 1,
                "ours_after": 1.0,
                "theirs_after": 1.0,
                "gap_after": 0.0,
                "within_tolerance": True,
            },
            "runs": [],
        },
    }
    lines = list(S.table(result))
    assert "a: failed: RuntimeError: boom" in lines and "c: did not run" in lines
    assert any(line.startswith("b: equal loss") for line in lines)
