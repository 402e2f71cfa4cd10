"""The learning rates by model width, and the pretraining run that barely moved its loss."""

from __future__ import annotations

import pytest

from bertstream.trainer.model_config import PRESETS
from bertstream.trainer.optim.advice import pretrain_warning, rate, suggested_lr
from bertstream.trainer.optim.schedule import Schedule


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
    line = pretrain_warning((1, 10.91), (200, 10.65), 1e-4, 128, Schedule(1000, 200))  # the issue's: 200 at 1e-4
    assert line is not None and line.startswith("warning: the training loss barely moved in 199 steps")
    assert (
        "--warmup-steps 1000 the rate was still warming up" in line
        and "try --lr 1e-3 (the rate for hidden size 128" in line
    )
    assert pretrain_warning((1, 10.91), (10, 10.90), 1e-4, 128, Schedule(1000, 10)) is None  # too short to judge
    assert pretrain_warning((1, 10.91), (200, 9.0), 1e-3, 128, Schedule(100, 200)) is None
    past = pretrain_warning((1, 10.91), (200, 10.65), 1e-4, 128, Schedule(100, 200))  # warmed up: not said
    assert past is not None and "--warmup-steps" not in past


def test_a_pretraining_run_that_barely_moves_warns_and_one_that_learns_does_not(demo_shards, tmp_path, capfd):
    from tests.trainer.pretrain.test_loop import train  # the pretraining tests' quick run (batch 8, 3 warm-up steps)

    def warnings(out: str, lr: float, steps: int = 24) -> list[str]:
        train(demo_shards, tmp_path / out, max_steps=steps, log_every=4, checkpoint_every=100, lr=lr)
        return [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]

    (line,) = warnings("slow", 1e-5)
    assert (
        line.startswith("[berttrain] warning: the training loss barely moved in 20 steps") and "try --lr 1e-3" in line
    )
    assert warnings("learned", 2e-3) == []
    assert warnings("slow", 1e-5, steps=48) == []  # resumed: not judged (a late run may rightly move little)
