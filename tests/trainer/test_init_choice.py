"""``--init``, declared once (``trainer/init_choice.py``): each command's help as before, required by both, and a
fine-tuning run's saved setting read in the layout of before the section."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.trainer.cli import main
from bertstream.trainer.embed import EmbedConfig
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.init_choice import InitChoice
from bertstream.trainer.weights import InitError
from tests.trainer.test_pooling import SAVED_BEFORE  # a fine-tuning run's settings as 6001fe2 saved them


def _leaf(cls: type) -> options.Leaf:
    return next(leaf for leaf in options.leaves(cls) if leaf.name == "init")


def test_one_declaration_gives_each_command_its_own_help_and_both_require_it(tmp_path):
    embed, finetune = _leaf(EmbedConfig), _leaf(FinetuneConfig)
    assert embed.field is finetune.field and options.FIXED in finetune.tags  # the one field, InitChoice.init
    assert "random:PRESET" in str(finetune.help) and "random:" not in str(embed.help)
    given = {
        "embed": ["--input", "x.txt"],
        "finetune": ["--task", "classification", "--train-data", "t", "--eval-data", "d"],
    }
    for command, flags in given.items():
        result = CliRunner().invoke(main, [command, *flags, "--output", str(tmp_path / "o")])
        assert result.exit_code == 2 and "Missing option '--init'" in result.output
    with pytest.raises(UsageError, match="is required") as e:
        InitChoice(init="")
    assert e.value.param == "init"
    assert InitChoice(init="ckpt").input_path == ("--init", "ckpt")
    with pytest.raises(InitError, match=r"^--init random:tiny: random:PRESET needs task data's vocabulary"):
        InitChoice(init="random:tiny").resolve(None)  # embed has no task data to borrow a vocabulary from


def test_a_run_saved_before_the_section_is_read_alike(tmp_path, monkeypatch):
    cfg = FinetuneConfig.build(**options.saved_values(FinetuneConfig, SAVED_BEFORE))
    assert cfg.starting == InitChoice(init="random:tiny")
    now = cfg.to_dict()
    assert now["starting"] == {"init": "random:tiny"} and "init" not in now  # saved in its section from now on
    import bertstream.trainer.finetune.loop as loop

    seen = []
    fake = {"best": {"epoch": 1, "step": 1, "metric": "m", "value": None, "predictions": "p"}}
    monkeypatch.setattr(loop, "finetune", lambda cfg: seen.append(cfg) or fake)
    for saved in (SAVED_BEFORE, now):  # --config of a config.json of either layout
        (tmp_path / "config.json").write_text(json.dumps({"finetune": saved, "model": {}}))
        result = CliRunner().invoke(main, ["finetune", "--config", str(tmp_path / "config.json"), "--output", "o2"])
        assert result.exit_code == 0, result.output
        assert (seen[-1].starting.init, seen[-1].train_data) == ("random:tiny", "train")
