"""Every ``berttrain`` command, given bad arguments, ends in one ``Error:`` line and exit 2 (usage) or 1 (run
time), never a traceback (issue 13, section 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tests.trainer.test_run_safety import small_dataset
from trainer import checkpoint as ckpt
from trainer.cli import main

FAST = [
    "--batch-size",
    "4",
    "--max-steps",
    "2",
    "--warmup-steps",
    "1",
    "--checkpoint-every",
    "2",
    "--num-workers",
    "0",
    "--no-tensorboard",
]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A dataset, one with another vocabulary, a corrupt one, a finished run and broken run folders."""
    root = tmp_path_factory.mktemp("cli_errors")
    ds = small_dataset(root / "ds")
    other = small_dataset(root / "other", vocab_size=1300)
    corrupt = root / "corrupt"
    shutil.copytree(ds, corrupt)
    shard = sorted(corrupt.glob("*.arrow"))[0]
    shard.write_bytes(b"\0" * shard.stat().st_size)  # same size, wrong content
    late = root / "late"  # the second shard is damaged: only the loader worker that opens it finds out
    shutil.copytree(ds, late)
    shard = sorted(late.glob("*.arrow"))[1]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    badschema = root / "badschema"
    shutil.copytree(ds, badschema)
    m = json.loads((badschema / "manifest.json").read_text())
    m["schema_version"] = 999
    (badschema / "manifest.json").write_text(json.dumps(m))
    badvocab = root / "badvocab"  # shards whose schema metadata names another vocabulary than the manifest
    shutil.copytree(ds, badvocab)
    m = json.loads((badvocab / "manifest.json").read_text())
    m["vocab"]["sha256"] = json.loads((other / "manifest.json").read_text())["vocab"]["sha256"]
    (badvocab / "manifest.json").write_text(json.dumps(m))
    shutil.copy(other / "vocab.txt", badvocab / "vocab.txt")
    run = root / "run"
    result = CliRunner().invoke(main, ["pretrain", "--data", str(ds), "--output", str(run), *FAST])
    assert result.exit_code == 0, result.output
    position = root / "position"  # a checkpoint whose data position is damaged
    shutil.copytree(run, position)
    state_file = ckpt.step_dir(position, 2) / "state.json"
    state = json.loads(state_file.read_text())
    state["data"]["format"] = "something-else"
    state_file.write_text(json.dumps(state))
    no_opt = root / "no_opt"
    shutil.copytree(ckpt.step_dir(run, 2), no_opt)
    (no_opt / "optimizer.pt").unlink()
    empty_ckpt = root / "empty_ckpt"
    empty_ckpt.mkdir()
    (root / "model.json").write_text("{not json")
    torn = root / "torn"
    torn.mkdir()
    (torn / "metrics.jsonl").write_text('{"step": 1, "loss": 1}\n{"step": 2, oops\n{"step": 3, "loss": 1}\n')
    return {
        "root": root,
        "ds": ds,
        "other": other,
        "corrupt": corrupt,
        "badschema": badschema,
        "late": late,
        "badvocab": badvocab,
        "run": run,
        "position": position,
        "no_opt": no_opt,
        "empty_ckpt": empty_ckpt,
        "torn": torn,
    }


def pretrain(w: dict[str, Path], *args: str, data: str = "ds", out: str | None = None) -> list[str]:
    output = str(w["root"] / (out or "fresh")) if out != "" else None
    return [
        "pretrain",
        "--data",
        str(w[data]) if data in w else data,
        *(["--output", output] if output else []),
        *FAST,
        *args,
    ]


# (name, argv builder, exit code, text the Error line must hold)
CASES = [
    ("pretrain --device tpu", lambda w: pretrain(w, "--device", "tpu"), 2, "must be auto, cpu, cuda or cuda:N"),
    ("pretrain --batch-size 0", lambda w: pretrain(w, "--batch-size", "0"), 2, "must be an integer >= 1"),
    ("pretrain duplicate --data", lambda w: pretrain(w, "--data", str(w["ds"]) + "/./"), 2, "more than once"),
    ("pretrain no --output", lambda w: pretrain(w, out=""), 2, "Missing option '--output'"),
    ("pretrain missing --data", lambda w: pretrain(w, data="/nonexistent/ds"), 1, "no manifest"),
    ("pretrain ShardError", lambda w: pretrain(w, data="corrupt"), 1, "--skip-corrupt"),
    (
        "pretrain ShardError in a loader worker",
        lambda w: pretrain(w, "--num-workers", "1", "--max-steps", "30", data="late", out="late_run"),
        1,
        "pretrain-00001-of-00002.arrow: content hashes to",
    ),
    ("pretrain SchemaError", lambda w: pretrain(w, data="badschema"), 1, "schema"),
    ("pretrain VocabMismatchError", lambda w: pretrain(w, data="badvocab"), 1, "vocab"),
    (
        "pretrain other --eval-data vocabulary",
        lambda w: pretrain(w, "--eval-data", str(w["other"])),
        1,
        "another vocabulary",
    ),
    (
        "pretrain fewer samples than one batch",
        lambda w: pretrain(w, "--batch-size", "100000"),
        1,
        "fewer than one global batch",
    ),
    (
        "pretrain --resume none into a used folder",
        lambda w: pretrain(w, "--resume", "none", out="run"),
        1,
        "--overwrite",
    ),
    ("pretrain changed --lr on resume", lambda w: pretrain(w, "--lr", "0.5", out="run"), 1, "--lr 0.5"),
    ("pretrain data-position mismatch", lambda w: pretrain(w, out="position"), 1, "data position"),
    ("pretrain CheckpointError", lambda w: pretrain(w, "--resume", str(w["no_opt"])), 1, "lacks optimizer.pt"),
    (
        "pretrain bad --model-config",
        lambda w: pretrain(w, "--model-config", str(w["root"] / "model.json")),
        1,
        "--model-config",
    ),
    (
        "pretrain --init-from a non-HF folder",
        lambda w: pretrain(w, "--init-from", str(w["empty_ckpt"])),
        1,
        str(Path("empty_ckpt")),
    ),
    ("pretrain --resume missing", lambda w: pretrain(w, "--resume", "/nonexistent/ck"), 1, "no such checkpoint"),
    (
        "export-hf missing folder",
        lambda w: ["export-hf", "/nonexistent/ck", str(w["root"] / "hf")],
        2,
        "does not exist",
    ),
    (
        "export-hf incomplete checkpoint",
        lambda w: ["export-hf", str(w["empty_ckpt"]), str(w["root"] / "hf")],
        1,
        "checkpoint lacks",
    ),
    ("plot folder without metrics", lambda w: ["plot", str(w["empty_ckpt"])], 1, "no metrics.jsonl"),
    ("plot damaged metrics", lambda w: ["plot", str(w["torn"])], 1, "metrics.jsonl:2: not a JSON record"),
    (
        "plot --baseline-from missing",
        lambda w: ["plot", str(w["run"]), "--baseline-from", "/nonexistent/ds"],
        1,
        "no manifest",
    ),
    (
        "finetune --device tpu",
        lambda w: [
            "finetune",
            "--task",
            "classification",
            "--train-data",
            "a",
            "--eval-data",
            "b",
            "--init",
            "random:tiny",
            "--output",
            "o",
            "--device",
            "tpu",
        ],
        2,
        "cuda:N",
    ),
    (
        "finetune missing --train-data",
        lambda w: [
            "finetune",
            "--task",
            "classification",
            "--train-data",
            "/nonexistent/t",
            "--eval-data",
            "/nonexistent/e",
            "--init",
            "random:tiny",
            "--output",
            str(w["root"] / "ft"),
        ],
        1,
        "/nonexistent/t",
    ),
]
if not torch.cuda.is_available():
    CASES.append(
        ("pretrain --device cuda without a GPU", lambda w: pretrain(w, "--device", "cuda"), 1, "no CUDA GPU is visible")
    )


@pytest.mark.parametrize(("argv", "code", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_arguments_end_in_one_error_line(world, argv, code, text):
    result = CliRunner().invoke(main, argv(world))
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not an uncaught error (a traceback)
    assert "Traceback" not in result.output
    assert len(errors) == 1 and text in errors[0], result.stderr
