"""``berttrain finetune`` under the principles of issue 17 (the pretraining side: tests/trainer/test_cli_errors.py):
nothing destroyed before every input is checked, no input inside a folder --overwrite clears, nothing left by a
run that failed to start, divergence stops the run, one line always, secrets redacted."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.cli import main
from tests.argv import with_flags
from tests.trainer.finetune.conftest import finetune_run
from tests.trainer.test_cli_errors import one_error


@pytest.fixture(scope="module")
def earlier(sst2, tmp_path_factory) -> Path:
    """A finished one-epoch run (its outputs: results.json, predictions, checkpoints/, resume/)."""
    out = tmp_path_factory.mktemp("ft_earlier") / "run"
    finetune_run("classification", sst2["train"], sst2["dev"], out, max_steps=2)
    return out


def argv(sst2, out: Path, *extra: str, train: str | None = None, init: str = "random:tiny") -> list[str]:
    base = [
        "finetune",
        "--task",
        "classification",
        "--train-data",
        train or str(sst2["train"]),
        "--eval-data",
        str(sst2["dev"]),
        "--init",
        init,
        "--output",
        str(out),
        "--max-steps",
        "2",
        "--batch-size",
        "16",
        "--no-tensorboard",
    ]
    return with_flags(base, extra)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("bad", "text"),
    [
        (["--train-data", "MISSING"], "MISSING"),
        (["--eval-data", "MISSING"], "MISSING"),
        (["--init", "MISSING"], "not a folder"),
        (["--init", "random:huge"], "unknown preset"),
    ],
    ids=["mistyped --train-data", "mistyped --eval-data", "missing --init", "unknown random preset"],
)
def test_overwrite_removes_nothing_before_every_input_is_checked(sst2, earlier, tmp_path, bad, text):
    run = tmp_path / "run"
    shutil.copytree(earlier, run)
    before = snapshot(run)
    args = argv(sst2, run, "--overwrite")
    missing = str(tmp_path / "nope")
    flag, value = bad[0], bad[1].replace("MISSING", missing)
    args[args.index(flag) + 1] = value
    one_error(CliRunner().invoke(main, args), 1, text.replace("MISSING", missing))
    assert snapshot(run) == before


def test_init_inside_output_is_refused_with_overwrite(sst2, earlier, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(earlier, run)
    before = snapshot(run)
    # --init RUN (its newest checkpoint) into the same RUN with --overwrite: the checkpoint would be deleted
    result = CliRunner().invoke(main, argv(sst2, run, "--overwrite", init=str(run)))
    one_error(result, 2, f"{run} overlaps inputs: --init {run} lies inside it")
    assert snapshot(run) == before


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)], ids=["plain", "--overwrite"])
def test_a_dataset_or_a_model_folder_as_output_is_refused(sst2, earlier, tmp_path, overwrite):
    # Round 7: `finetune --output DATASET` wrote results.json, predictions.tsv and checkpoints/ beside the
    # dataset's manifest and shards (a run mixed into a dataset), and into a Hugging Face export with
    # --overwrite it removed the export's config.json (a name a fine-tuning run writes).
    data = tmp_path / "data"
    shutil.copytree(sst2["dev"], data)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "bert"}')
    (hf / "model.safetensors").write_bytes(b"weights")
    for out, held in ((data, "manifest.json"), (hf, "model.safetensors")):
        before = snapshot(out)
        result = CliRunner().invoke(main, argv(sst2, out, *overwrite))
        one_error(result, 2, f"{out} holds {held}")
        assert snapshot(out) == before


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)], ids=["plain", "--overwrite"])
def test_a_run_of_the_other_command_as_output_is_refused(sst2, earlier, tmp_path, overwrite):
    # Round 8: `finetune --output PRETRAINING_RUN --overwrite` deleted the pretraining's metrics.jsonl and
    # config.json (names a fine-tuning run writes), its checkpoints left without their history; and
    # `pretrain --output FINETUNING_RUN --overwrite` cleared the fine-tuning's results, predictions and best
    # checkpoint. A run folder holds one command's run, whatever --overwrite says.
    from tests.trainer.test_run_safety import run as pretrain_run
    from tests.trainer.test_run_safety import small_dataset

    pretraining = tmp_path / "pretraining"
    pretrain_run(small_dataset(tmp_path / "ds"), pretraining, max_steps=2, checkpoint_every=2)
    before = snapshot(pretraining)
    result = CliRunner().invoke(main, argv(sst2, pretraining, *overwrite))
    one_error(result, 2, f"{pretraining} holds a berttrain pretrain run (its config.json), not a finetune run's")
    assert snapshot(pretraining) == before
    finetuning = tmp_path / "finetuning"
    shutil.copytree(earlier, finetuning)
    before = snapshot(finetuning)
    args = ["pretrain", "--data", str(tmp_path / "ds"), "--output", str(finetuning), "--max-steps", "1", *overwrite]
    one_error(CliRunner().invoke(main, args), 2, f"{finetuning} holds a berttrain finetune run (its config.json)")
    assert snapshot(finetuning) == before


def test_finetune_overwrite_into_a_running_pretraining_is_refused(sst2, earlier, tmp_path):
    """Commands own what they write (issue 33): finetune --overwrite into the folder of a pretraining run that
    is writing it wiped its metrics, and the pretraining's checkpoint rotation then deleted the fine-tuning's
    best checkpoint. The running pretraining holds the folder's lock (as this process does here, under the
    name berttrain pretrain gives it): the fine-tuning is refused before it reads or clears anything."""
    from bertstream.trainer import rundir

    run = tmp_path / "run"
    shutil.copytree(earlier, run)
    before = snapshot(run)
    with rundir.locked(run, "berttrain pretrain"):
        result = CliRunner().invoke(main, argv(sst2, run, "--overwrite"))
        one_error(result, 2, f"{run} is being written by another run (berttrain pretrain, pid")
        assert {k: v for k, v in snapshot(run).items() if k != rundir.LOCK_NAME} == before


def test_a_run_that_fails_to_start_leaves_no_folder(sst2, tmp_path):
    out = tmp_path / "runs" / "x"
    result = CliRunner().invoke(main, argv(sst2, out, train=str(tmp_path / "nope")))
    assert result.exit_code == 1, result.output
    assert not (tmp_path / "runs").exists()


def test_a_diverging_fine_tuning_run_stops_with_one_line(sst2, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, argv(sst2, out, "--lr", "1e30", "--warmup-ratio", "0", "--max-steps", "6"))
    line = one_error(result, 1, "training diverged at step ")
    assert "nan" in line or "inf" in line
    assert not list(out.rglob("*.tmp-*"))


def test_eval_data_equal_to_train_data_is_warned(sst2, tmp_path):
    args = argv(sst2, tmp_path / "run")
    args[args.index("--eval-data") + 1] = str(sst2["train"])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert sum("is also --train-data" in line for line in result.stderr.splitlines()) == 1


def test_export_hf_of_a_fine_tuning_run_or_its_checkpoint_writes_its_task_class(earlier, tmp_path):
    written = []
    for i, source in enumerate((earlier, ckpt.list_checkpoints(earlier)[-1])):
        result = CliRunner().invoke(main, ["export-hf", str(source), str(tmp_path / f"hf{i}")])
        assert result.exit_code == 0, result.output
        config = json.loads((tmp_path / f"hf{i}" / "config.json").read_text())
        assert config["architectures"] == ["BertForSequenceClassification"] and config["label2id"] == {"0": 0, "1": 1}
        written.append({p.name: p.read_bytes() for p in (tmp_path / f"hf{i}").iterdir()})
    assert written[0] == written[1] and set(written[0]) >= {"model.safetensors", "tokenizer.json", "vocab.txt"}
    result = CliRunner().invoke(main, ["export-hf", str(earlier), str(tmp_path / "hf0")])  # same folder policy
    one_error(result, 1, "already holds")


def test_a_password_in_a_url_is_not_written_by_finetune(sst2, tmp_path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    root = sst2["train"].parent
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://bob:hunter22@127.0.0.1:{server.server_address[1]}"
        out = tmp_path / "run"
        result = CliRunner().invoke(main, argv(sst2, out, train=f"{base}/{sst2['train'].name}", init="random:tiny"))
    finally:
        server.shutdown()
    assert result.exit_code == 0, result.output
    assert "hunter22" not in result.output
    written = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".tsv", ".txt")]
    assert "results.json" in {p.name for p in written}
    assert not [p for p in written if "hunter22" in p.read_text(encoding="utf-8", errors="replace")]


@pytest.mark.slow  # a process importing torch, then the 3 s wait
def test_a_lone_fine_tuning_rank_of_two_ends_after_its_dist_timeout(sst2, tmp_path):
    # Round 8: finetune had no --dist-timeout: a lone rank of WORLD_SIZE=2 waited the default 300 s in silence,
    # then named "--dist-timeout 300 s", a flag only pretraining took.
    import os
    import subprocess
    import sys

    from tests.beam_services import free_port

    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(free_port())
    args = argv(sst2, tmp_path / "run", "--dist-timeout", "3", init="random:tiny")
    done = subprocess.run(
        [sys.executable, "-m", "bertstream.trainer", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "the ranks did not meet" in errors[0] and "within --dist-timeout 3 s" in errors[0]
    # and it said it was waiting, before the timeout ended it
    assert "[berttrain] rank 0 of WORLD_SIZE 2 waits for the other ranks at MASTER_ADDR:MASTER_PORT" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["finetune", "embed"])
def test_a_checkpoint_lacking_an_encoder_tensor_is_one_line(sst2, earlier, tmp_path, command):
    # Round 8: `finetune --init CKPT` whose model.safetensors lacks one encoder tensor was a ValueError traceback
    # (embed said it in one line; the check is the fine-tuning loader's, which both use).
    from safetensors.torch import load_file, save_file

    checkpoint = tmp_path / "ck"
    shutil.copytree(ckpt.list_checkpoints(earlier)[-1], checkpoint)
    weights = load_file(checkpoint / ckpt.MODEL_FILE)
    weights.pop("bert.encoder.layer.0.attention.self.query.weight")
    save_file(weights, checkpoint / ckpt.MODEL_FILE)
    if command == "finetune":
        args = argv(sst2, tmp_path / "run", init=str(checkpoint))
    else:
        (tmp_path / "texts.txt").write_text("a text\n")
        args = ["embed", "--init", str(checkpoint), "--input", str(tmp_path / "texts.txt")]
        args += ["--output", str(tmp_path / "e.arrow")]
    result = CliRunner().invoke(main, args)
    one_error(result, 1, f"--init {checkpoint}: the initial weights lack encoder tensor(s)")


def test_grad_accum_past_one_epoch_is_refused_before_the_folder_is_touched(sst2, earlier, tmp_path):
    # Round 8: `--grad-accum 100000` over 20 batches an epoch trained, each step the whole epoch, its line saying
    # "3 steps of 100000 batches"; pretraining refuses it (a batch past the data).
    run = tmp_path / "run"
    shutil.copytree(earlier, run)
    before = snapshot(run)
    result = CliRunner().invoke(main, argv(sst2, run, "--grad-accum", "100000", "--overwrite"))
    one_error(result, 1, "--grad-accum 100000: one optimizer step would take 100000 batches, more than the 20 of")
    assert snapshot(run) == before


@pytest.mark.parametrize("command", ["finetune", "pretrain"])
def test_the_file_system_root_is_no_run_folder(sst2, tmp_path, command, monkeypatch):
    # Round 8: `finetune --output /` wrote results.json, predictions.tsv, config.json, metrics.jsonl,
    # checkpoints/ and resume/ into the root folder. Refused before anything is read or written; the root itself
    # is never written by this test (the check runs first).
    import os

    before = sorted(os.listdir("/"))
    if command == "finetune":
        args = argv(sst2, Path("/"))
    else:
        args = ["pretrain", "--data", str(sst2["train"]), "--output", "/", "--max-steps", "1"]
    one_error(CliRunner().invoke(main, args), 2, "/ is the file system's root, not a run folder")
    assert sorted(os.listdir("/")) == before


@pytest.mark.parametrize("command", ["finetune", "pretrain"])
def test_an_output_link_that_points_at_itself_is_one_line(sst2, tmp_path, command):
    # Round 8's rerun: `ln -s lnk lnk; berttrain pretrain --output lnk` was Python's 'RuntimeError: Symlink loop'
    # under a traceback, from the root check's resolve().
    loop = tmp_path / "lnk"
    loop.symlink_to("lnk")
    if command == "finetune":
        args = argv(sst2, loop)
    else:
        args = ["pretrain", "--data", str(sst2["train"]), "--output", str(loop), "--max-steps", "1"]
    one_error(CliRunner().invoke(main, args), 2, f"{loop} cannot be followed (")
    assert loop.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["lnk"]
