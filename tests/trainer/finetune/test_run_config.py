"""``berttrain pretrain|finetune --config RUN/config.json``: a saved run's flags as the defaults of a new command
line, every flag of either command; flags given win; a file of the other command is refused in one line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.trainer.cli import main
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.finetune.config import FinetuneConfig


def _captured(monkeypatch, module: str, args: list[str]) -> Any:
    """The config the command builds from ``args`` (its run replaced: what is checked here is the command line)."""
    seen: list[Any] = []
    if module == "pretrain":
        import bertstream.trainer.pretrain.loop as loop

        monkeypatch.setattr(loop, "pretrain", lambda cfg: seen.append(cfg) or {"step": 0, "run_dir": ""})
    else:
        import bertstream.trainer.finetune.loop as loop

        fake = {"best": {"epoch": 1, "step": 1, "metric": "m", "value": None, "predictions": "p"}}
        monkeypatch.setattr(loop, "finetune", lambda cfg: seen.append(cfg) or fake)
    result = CliRunner().invoke(main, args, prog_name="berttrain")
    assert result.exit_code == 0, result.output
    return seen[0]


@pytest.fixture(scope="module")
def pretrain_run(demo_shards, tmp_path_factory):
    """A real two-step run with flags away from their defaults (and --overwrite, which a config never repeats)."""
    run = tmp_path_factory.mktemp("pre") / "run"
    args = ["pretrain", "--data", str(demo_shards), "--output", str(run), "--batch-size", "4", "--max-steps", "2"]
    args += ["--lr", "3e-3", "--lr-schedule", "cosine", "--warmup-steps", "1", "--no-tensorboard", "--seed", "7"]
    args += ["--num-workers", "0", "--masking", "dynamic", "--whole-word-mask", "--no-nsp", "--overwrite"]
    result = CliRunner().invoke(main, args, prog_name="berttrain")
    assert result.exit_code == 0, result.output
    return run


def test_pretrain_from_its_config_json_takes_every_saved_flag_and_the_command_lines_win(
    pretrain_run, tmp_path, monkeypatch
):
    saved = TrainConfig.build(
        **options.saved_values(TrainConfig, json.loads((pretrain_run / "config.json").read_text())["train"])
    )
    assert (saved.optim.lr, saved.optim.lr_schedule, saved.run.seed, saved.objective.no_nsp) == (
        3e-3,
        "cosine",
        7,
        True,
    )
    args = ["pretrain", "--config", str(pretrain_run / "config.json"), "--output", str(tmp_path / "next")]
    cfg = _captured(monkeypatch, "pretrain", [*args, "--max-steps", "5"])
    want = {**options.flat(saved), "output": str(tmp_path / "next"), "max_steps": 5, "overwrite": False}
    assert options.flat(cfg) == want  # every flag the run had; --overwrite never comes from a file
    # the same file, the flags in another order (click reads --config first, whatever its place)
    late = _captured(monkeypatch, "pretrain", ["pretrain", "--output", str(tmp_path / "x"), *args[1:3]])
    assert options.flat(late) == {**want, "max_steps": 2, "output": str(tmp_path / "x")}
    # a flag on the command line wins over its saved value; the saved ones are checked together with it
    # (--log-every: --eval-batches typed without --eval-data, which this run has none of, is refused)
    cfg = _captured(monkeypatch, "pretrain", [*args, "--lr", "1e-4", "--lr-schedule", "wsd", "--log-every", "3"])
    assert (cfg.optim.lr, cfg.optim.lr_schedule, cfg.run.log_every, cfg.run.tensorboard) == (1e-4, "wsd", 3, False)
    refused = CliRunner().invoke(main, [*args, "--masking", "static"])  # the saved --whole-word-mask needs dynamic
    assert refused.exit_code == 2 and "'--whole-word-mask': needs --masking dynamic" in refused.output


def test_a_config_started_run_trains_as_the_saved_one(pretrain_run, tmp_path):
    again = tmp_path / "again"
    args = ["pretrain", "--config", str(pretrain_run / "config.json"), "--output", str(again)]
    result = CliRunner().invoke(main, args, prog_name="berttrain")
    assert result.exit_code == 0, result.output
    first, second = (json.loads((d / "config.json").read_text())["train"] for d in (pretrain_run, again))
    first["run_folder"]["output"] = second["run_folder"]["output"]
    first["run_folder"]["overwrite"] = False
    assert first == second
    losses = [
        [json.loads(x)["loss"] for x in (d / "metrics.jsonl").read_text().splitlines()] for d in (pretrain_run, again)
    ]
    assert losses[0] == losses[1]  # the same seed, data and settings: the same run


def test_finetune_from_its_config_json_or_results_json(sst2, tmp_path, monkeypatch):
    from tests.trainer.finetune.conftest import finetune_run

    run = tmp_path / "ft"
    finetune_run("classification", sst2["train"], sst2["dev"], run, max_steps=2, lr=2e-3, pooling="mean")
    for name in ("config.json", "results.json"):
        cfg = _captured(
            monkeypatch, "finetune", ["finetune", "--config", str(run / name), "--epochs", "4", "--output", "o"]
        )
        saved = FinetuneConfig.build(
            **options.saved_values(FinetuneConfig, json.loads((run / "config.json").read_text())["finetune"])
        )
        assert options.flat(cfg) == {**options.flat(saved), "epochs": 4, "output": "o"}
        assert (cfg.optim.lr, cfg.pooling, cfg.max_steps, cfg.run_folder.overwrite) == (2e-3, "mean", 2, False)


def test_a_config_of_the_other_command_or_of_none_is_refused_in_one_line(pretrain_run, sst2, tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"finetune": {"task": "classification"}}))
    result = CliRunner().invoke(main, ["finetune", "--config", str(pretrain_run / "config.json")])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        f"Error: Invalid value for '--config': {pretrain_run / 'config.json'} is the configuration of a berttrain "
        "pretrain run: pass it to berttrain pretrain --config"
    )
    result = CliRunner().invoke(main, ["pretrain", "--config", str(tmp_path / "other.json")])
    assert result.exit_code == 2 and result.output.splitlines()[-1].endswith(
        "is the configuration of a berttrain finetune run: pass it to berttrain finetune --config"
    )
    (tmp_path / "notes.json").write_text('{"a": 1}')
    result = CliRunner().invoke(main, ["pretrain", "--config", str(tmp_path / "notes.json")])
    assert result.exit_code == 2 and "is no berttrain run configuration" in result.output.splitlines()[-1]
    (tmp_path / "broken.json").write_text("{")
    result = CliRunner().invoke(main, ["pretrain", "--config", str(tmp_path / "broken.json")])
    assert result.exit_code == 2 and "does not read as JSON" in result.output.splitlines()[-1]


@pytest.mark.slow  # two processes importing torch a command
@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_a_config_that_is_no_regular_file_is_refused_unread(tmp_path, command):
    # Round 8: `--config FIFO` waited for a writer with no end (read_text), and a link to /dev/zero would have
    # filled the memory: --config goes through the capped reader of every small file.
    import os
    import subprocess
    import sys

    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    for name, kind in (("fifo.json", "a FIFO (named pipe)"), ("zero.json", "a device")):
        done = subprocess.run(
            [sys.executable, "-m", "bertstream.trainer", command, "--config", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=60,  # before the fix: still waiting on the FIFO
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines()[-1] == (
            f"Error: Invalid value for '--config': the file {tmp_path / name} is {kind}, not a regular file"
        )
