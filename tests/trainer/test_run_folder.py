"""The run folder's settings, ``--output``, ``--resume`` and ``--overwrite``: one section of both commands
(``trainer/run_folder.RunFolder``) with each command's help, defaults and choices, checked once; and the
``config.json`` of runs saved before it (``--output`` in the ``run`` section, ``--resume`` and ``--overwrite`` in
``checkpoint``; fine-tuning's ``--resume`` at the top) still read by ``--config`` and still resumed."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.trainer.cli import main
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.metrics import read_metrics
from tests.trainer.test_run_safety import run, small_dataset

FOLDER = ("output", "resume", "overwrite")
FINETUNING = {"task": "classification", "train_data": "t", "eval_data": "e", "init": "random:tiny"}

# A pretraining run's config.json "train" as saved before the run folder's section (the layout of 6001fe2), cut
# to the settings that tell: the others take their defaults when read.
BEFORE_TRAIN = {
    "data": {"paths": ["DS"], "num_workers": 0},
    "eval_data": None,
    "model": {"preset": "tiny"},
    "run": {"output": "runs/old", "seed": 3, "log_every": 7, "tensorboard": False},
    "batch_size": 4,
    "max_steps": 9,
    "checkpoint": {"checkpoint_every": 2, "keep_checkpoints": 5, "resume": "none", "reset_optimizer": False,
                   "overwrite": True},
}  # fmt: skip
# A fine-tuning run's config.json "finetune" as saved before it: --output in "run", --resume at the top.
BEFORE_FINETUNE = {
    "task": "classification", "train_data": "T", "eval_data": "E", "init": "random:tiny",
    "run": {"output": "runs/ft", "seed": 5, "log_every": 50}, "resume": "auto", "epochs": 2,
}  # fmt: skip


def test_both_commands_declare_the_run_folder_once_with_their_own_help_defaults_and_choices():
    pre = {leaf.name: leaf for leaf in options.leaves(TrainConfig)}
    fine = {leaf.name: leaf for leaf in options.leaves(FinetuneConfig)}
    for name in FOLDER:  # the one field of the one section, in both configs
        assert pre[name].field is fine[name].field and pre[name].section == fine[name].section == "run_folder"
    assert (pre["resume"].default, pre["resume"].choices) == ("auto", None)  # a checkpoint folder too
    assert (fine["resume"].default, fine["resume"].choices) == ("none", ("auto", "none"))
    assert "results.json" in str(fine["output"].help) and "results.json" not in str(pre["output"].help)
    flags = {name: {p.name: p for p in main.commands[name].params} for name in ("pretrain", "finetune")}
    assert isinstance(flags["finetune"]["resume"].type, click.Choice)
    assert not isinstance(flags["pretrain"]["resume"].type, click.Choice)
    assert flags["finetune"]["overwrite"].is_flag and flags["pretrain"]["overwrite"].is_flag


def test_the_run_folders_values_are_checked_once_for_both_commands():
    with pytest.raises(UsageError) as pre:
        TrainConfig.build(paths=("s3://b/ds",), output="s3://b/run")
    assert (pre.value.param, pre.value.message) == (
        "output",
        "s3://b/run: the run folder must be local (checkpoints are written to a temporary folder and renamed, which "
        "object stores cannot do); --data may be s3://...",
    )
    with pytest.raises(UsageError) as fine:
        FinetuneConfig.build(**FINETUNING, output="s3://b/ft")
    assert (fine.value.param, fine.value.message) == (
        "output",
        "s3://b/ft: the run folder must be local (checkpoints and predictions are written to local files); "
        "--train-data and --eval-data may be s3://...",
    )
    with pytest.raises(UsageError, match="must be auto or none, got 'ck'"):  # fine-tuning continues its own run
        FinetuneConfig.build(**FINETUNING, output="ft", resume="ck")
    with pytest.raises(UsageError, match=r"needs --resume PATH"):
        TrainConfig.build(paths=("ds",), output="o", reset_optimizer=True)
    for cls, given in ((TrainConfig, {"paths": ("ds",)}), (FinetuneConfig, FINETUNING)):
        with pytest.raises(UsageError, match="is required"):
            cls.build(**given, output="")
    assert TrainConfig.build(paths=("ds",), output="o", resume="ck", reset_optimizer=True).run_folder.resume == "ck"


def _captured(monkeypatch, command: str, args: list[str]):
    """The config ``berttrain COMMAND ARGS`` builds (its run replaced: what is checked is the command line)."""
    seen = []
    if command == "pretrain":
        import bertstream.trainer.pretrain.loop as loop

        monkeypatch.setattr(loop, "pretrain", lambda cfg: seen.append(cfg) or {"step": 0, "run_dir": ""})
    else:
        import bertstream.trainer.finetune.loop as loop

        fake = {"best": {"epoch": 1, "step": 1, "metric": "m", "value": None, "predictions": "p"}}
        monkeypatch.setattr(loop, "finetune", lambda cfg: seen.append(cfg) or fake)
    result = CliRunner().invoke(main, [command, *args], prog_name="berttrain")
    assert result.exit_code == 0, result.output
    return seen[0]


def test_a_config_json_saved_before_the_section_still_gives_its_run_folder(tmp_path, monkeypatch):
    pre = options.saved_values(TrainConfig, BEFORE_TRAIN)
    assert {k: pre[k] for k in FOLDER} == {"output": "runs/old", "resume": "none", "overwrite": True}
    assert {k: options.saved_values(FinetuneConfig, BEFORE_FINETUNE)[k] for k in ("output", "resume")} == {
        "output": "runs/ft",
        "resume": "auto",
    }
    (tmp_path / "pre.json").write_text(json.dumps({"train": BEFORE_TRAIN, "model": {}}))
    cfg = _captured(monkeypatch, "pretrain", ["--config", str(tmp_path / "pre.json")])
    # the saved folder and --resume; --overwrite is never taken from a file (it would clear the run's own folder)
    assert (cfg.run_folder.output, cfg.run_folder.resume, cfg.run_folder.overwrite) == ("runs/old", "none", False)
    assert (cfg.run.seed, cfg.checkpoint.keep_checkpoints, cfg.data.paths, cfg.max_steps) == (3, 5, ("DS",), 9)
    (tmp_path / "ft.json").write_text(json.dumps({"finetune": BEFORE_FINETUNE, "model": {}}))
    cfg = _captured(monkeypatch, "finetune", ["--config", str(tmp_path / "ft.json"), "--output", "runs/next"])
    assert (cfg.run_folder.output, cfg.run_folder.resume, cfg.run.seed, cfg.epochs) == ("runs/next", "auto", 5, 2)


def _as_before_the_section(path: Path) -> None:
    """Rewrite a run's config.json as runs wrote it before the run folder's section."""
    saved = json.loads(path.read_text())
    train = saved["train"]
    folder = train.pop("run_folder")
    train["run"]["output"] = folder["output"]
    train["checkpoint"].update(resume=folder["resume"], overwrite=folder["overwrite"])
    path.write_text(json.dumps(saved))


def test_a_run_saved_before_the_section_resumes(tmp_path):
    data = small_dataset(tmp_path / "ds")
    out = tmp_path / "run"
    assert [r["step"] for r in run(data, out, max_steps=2)] == [1, 2]
    for path in (out / "config.json", *out.glob("checkpoints/*/config.json")):
        _as_before_the_section(path)
    assert "run_folder" not in json.loads((out / "config.json").read_text())["train"]
    with pytest.raises(RunError, match="continues its run, but --lr"):  # the saved settings are read as a whole
        run(data, out, max_steps=4, lr=5e-3)
    assert [r["step"] for r in run(data, out, max_steps=4)] == [1, 2, 3, 4]  # --resume auto went on from step 2
    resumed = [r for r in read_metrics(out) if r.get("split", "train") == "train"]
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
