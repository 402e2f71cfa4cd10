"""``--pooling``, declared once (``trainer/pooling.py``): each command's choices, default and help as before, the
mean over real tokens both use, and a fine-tuned run's saved setting read in the layout of before the section."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.trainer.cli import main
from bertstream.trainer.embed import EmbedConfig
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.pooling import Pooling, export_refusal, mean_pool, trained_with

# A fine-tuning run's saved settings as a run of 6001fe2 wrote them (config.json's / results.json's "finetune"):
# --pooling at the top, beside the run and optimizer sections.
SAVED_BEFORE = {
    "task": "classification",
    "train_data": "train",
    "eval_data": "dev",
    "init": "random:tiny",
    "run": {"output": "ft", "seed": 3, "log_every": 50, "device": "cpu"},
    "resume": "none",
    "epochs": 2,
    "dropout": None,
    "pooling": "mean",
    "batch_size": 16,
    "optim": {"lr": 0.001, "warmup_ratio": 0.1, "layer_decay": 1.0},
}


def _leaf(cls: type) -> options.Leaf:
    return next(leaf for leaf in options.leaves(cls) if leaf.name == "pooling")


def test_one_declaration_gives_each_command_its_own_choices_default_and_help():
    embed, finetune = _leaf(EmbedConfig), _leaf(FinetuneConfig)
    assert (embed.choices, embed.default) == (("cls", "mean", "none"), "mean")
    assert (finetune.choices, finetune.default) == (("cls", "mean"), "cls")
    assert embed.help != finetune.help and "Sentence heads" in str(finetune.help)
    assert embed.field is finetune.field  # the one field, Pooling.pooling
    base = {"task": "classification", "train_data": "t", "eval_data": "d", "init": "random:tiny", "output": "o"}
    assert FinetuneConfig.build(**base, pooling="mean").pooled == Pooling(pooling="mean")
    # a config built in code (or read from a file) is held to the command's choices, as its flag is
    with pytest.raises(UsageError, match=r"must be one of \('cls', 'mean'\), got 'none'") as e:
        FinetuneConfig.build(**base, pooling="none")
    assert e.value.param == "pooling"
    with pytest.raises(UsageError, match="must be one of"):
        Pooling(pooling="max")
    result = CliRunner().invoke(main, ["finetune", *"--task classification --pooling none".split()])
    assert result.exit_code == 2 and "'none' is not one of 'cls', 'mean'" in result.output


def test_the_mean_reads_the_real_tokens_and_none_keeps_every_token():
    states = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)  # [B, T, H]
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert torch.equal(Pooling(pooling="mean").pool(states, mask), mean_pool(states, mask))
    assert torch.equal(mean_pool(states, mask)[0], states[0, :2].mean(0))  # padding does not pull the average
    assert torch.equal(Pooling(pooling="cls").pool(states, mask), states[:, 0])
    assert Pooling(pooling="none").pool(states, mask) is states and Pooling(pooling="none").per_token


def test_a_run_saved_before_the_section_is_read_alike(tmp_path, monkeypatch):
    cfg = FinetuneConfig.build(**options.saved_values(FinetuneConfig, SAVED_BEFORE))
    assert cfg.pooled.pooling == "mean" and cfg.optim.lr == 0.001 and cfg.run.seed == 3
    now = cfg.to_dict()
    assert now["pooled"] == {"pooling": "mean"} and "pooling" not in now  # saved in its section from now on
    for saved in (SAVED_BEFORE, now):  # the starting weights' head and the export read either layout
        assert trained_with(saved) == "mean"
        assert "was fine-tuned with --pooling mean" in str(export_refusal(saved, "ckpt"))
    assert trained_with({"task": "classification"}) == "cls" and export_refusal({}, "ckpt") is None  # before --pooling
    # --config of a config.json written before the section: the saved --pooling is the default of the new run
    import bertstream.trainer.finetune.loop as loop

    seen = []
    fake = {"best": {"epoch": 1, "step": 1, "metric": "m", "value": None, "predictions": "p"}}
    monkeypatch.setattr(loop, "finetune", lambda cfg: seen.append(cfg) or fake)
    (tmp_path / "config.json").write_text(json.dumps({"finetune": SAVED_BEFORE, "model": {}}))
    result = CliRunner().invoke(main, ["finetune", "--config", str(tmp_path / "config.json"), "--output", "o2"])
    assert result.exit_code == 0, result.output
    assert (seen[0].pooled.pooling, seen[0].epochs, seen[0].run_folder.output) == ("mean", 2, "o2")
