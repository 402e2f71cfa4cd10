"""The learning rates by model width, and the pretraining run that barely moved its loss."""

from __future__ import annotations

import pytest

from bertstream.trainer.model_config import PRESETS
from bertstream.trainer.optim.advice import pretrain_warning, rate, suggested_lr


def test_the_rates_follow_the_width_as_the_recipes_measured():
    hidden = {name: make(100).hidden_size for name, make in PRESETS.items()}
    assert [suggested_lr(hidden[n], "pretrain") for n in ("tiny", "mini", "small", "base", "large")] == [
        1e-3,
        1e-3,
        5e-4,
        1e-4,
        1e-4,
    ]
    assert [suggested_lr(hidden[n], "finetune") for n in ("tiny", "mini", "small", "base")] == [3e-4, 3e-4, 1e-4, 5e-5]
    assert [rate(x) for x in (1e-3, 3e-4, 5e-5, 1.5e-4, 0.5)] == ["1e-3", "3e-4", "5e-5", "1.5e-4", "0.5"]
    with pytest.raises(ValueError, match="phase"):
        suggested_lr(128, "embed")


def test_the_rule_fires_on_the_issues_run_and_not_on_short_or_moving_ones():
    line = pretrain_warning((1, 10.91), (200, 10.65), 1e-4, 128, 1000)  # the issue's run: 200 steps at 1e-4
    assert line is not None and line.startswith("warning: the training loss barely moved in 199 steps")
    assert "--warmup-steps 1000" in line and "try --lr 1e-3 (the rate for hidden size 128" in line
    assert pretrain_warning((1, 10.91), (10, 10.90), 1e-4, 128, 1000) is None  # too short to judge
    assert pretrain_warning((1, 10.91), (200, 9.0), 1e-3, 128, 100) is None


def test_a_pretraining_run_that_barely_moves_warns_and_one_that_learns_does_not(demo_shards, tmp_path, capfd):
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.pretrain.loop import pretrain

    def run(out, lr):
        cfg = TrainConfig.build(
            paths=(str(demo_shards),),
            output=str(tmp_path / out),
            batch_size=8,
            max_steps=24,
            warmup_steps=3,
            log_every=4,
            checkpoint_every=100,
            num_workers=0,
            tensorboard=False,
            lr=lr,
        )
        return pretrain(cfg)

    slow = run("slow", 1e-5)
    lines = [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]
    assert slow["warnings"] and lines == [f"[berttrain] {slow['warnings'][0]}"]
    assert "barely moved in 20 steps" in lines[0] and "try --lr 1e-3" in lines[0]
    learned = run("learned", 2e-3)
    assert learned["warnings"] == []
    assert [line for line in capfd.readouterr().err.splitlines() if "warning:" in line] == []
