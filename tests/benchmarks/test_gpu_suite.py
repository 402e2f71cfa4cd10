"""The GPU suite's CPU rehearsal (``benchmarks/gpu_suite.py --smoke``): every part runs on a tiny model over
real shards and SST-2 rows made from the shared data, and the JSON holds real figures."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import gpu_commands as C
from benchmarks import gpu_suite as S
from tests.conftest import shared_path


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    shared_path("pretrain", "wikipedia")
    out = tmp_path_factory.mktemp("gpu_suite")
    S.main(["--smoke", "--json", str(out / "suite.json"), "--logs", str(out / "logs")])
    return json.loads((out / "suite.json").read_text())


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


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


def test_hugging_face_from_the_same_weights_gives_the_same_loss(smoke: dict) -> None:
    eq = smoke["b"]["equal_loss"]
    assert eq["initial_gap"] < 1e-2 and eq["within_tolerance"], eq
    assert len(eq["ours_steps"]) == len(eq["theirs_steps"]) == S.SMOKE.equal_steps
    assert eq["ours_after"] < eq["ours_initial"]  # the steps trained: the comparison is not of two idle models


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


def test_the_commands_need_nothing_the_device_lacks(smoke: dict) -> None:
    # The commands above ran (exit 0) with only the device image's distributions and the carried wheels
    # importable (benchmarks/device_python.py): what they imported is within that set.
    imports = smoke["imports"]
    assert {"torch", "pyarrow"} <= set(imports["imported_distributions"])
    assert set(imports["needed_beyond_image"]) <= set(imports["carried"]), imports


def test_importtime_lines_give_top_level_modules() -> None:
    err = "import time: self [us] | cumulative | imported package\nimport time:  12 |  40 |   webdataset.cache\n"
    assert C.imported_modules(err + "other line\n") == {"webdataset"}
