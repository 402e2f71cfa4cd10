"""``--lr-schedule cosine``: warm-up, then half a cosine to zero at --max-steps (Hugging Face's curve), continued
exactly by a resume."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.metrics import read_metrics
from bertstream.trainer.optim.schedule import WarmupLinearDecay, build_scheduler
from bertstream.trainer.pretrain.loop import pretrain
from bertstream.trainer.pretrain.resume import extend_schedule


def test_cosine_warms_up_then_falls_as_half_a_cosine_to_zero():
    cos = WarmupLinearDecay(10, 110, "cosine")
    assert [cos(s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]  # the warm-up every schedule shares
    assert cos(10) == 1.0 and cos(60) == pytest.approx(0.5) and cos(110) == 0.0 and cos(500) == 0.0
    assert cos(35) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert all(cos(s) > cos(s + 1) for s in range(10, 110))


def test_cosine_is_hugging_faces_after_the_warm_up():
    transformers = pytest.importorskip("transformers")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    theirs = transformers.get_cosine_schedule_with_warmup(opt, 10, 110).lr_lambdas[0]
    ours = WarmupLinearDecay(10, 110, "cosine")
    assert [ours(s) for s in range(10, 111)] == pytest.approx([theirs(s) for s in range(10, 111)], abs=1e-12)


def test_a_longer_max_steps_replans_the_cosine_from_the_step_reached():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, 10, 100, "cosine")
    for _ in range(50):
        opt.step()
        sched.step()
    assert extend_schedule(sched, 10, 200, "cosine") == 100
    assert opt.param_groups[0]["lr"] == pytest.approx(WarmupLinearDecay(10, 200, "cosine")(50))


def test_a_resumed_cosine_run_takes_the_uninterrupted_runs_rates(demo_shards, tmp_path):
    settings = {
        "paths": (str(demo_shards),),
        "output": str(tmp_path / "run"),
        "batch_size": 4,
        "max_steps": 8,
        "warmup_steps": 2,
        "lr_schedule": "cosine",
        "lr": 1e-2,
        "log_every": 1,
        "checkpoint_every": 4,
        "num_workers": 0,
        "tensorboard": False,
    }
    pretrain(TrainConfig.build(**settings))
    whole = [(r["step"], r["lr"], r["loss"]) for r in read_metrics(tmp_path / "run")]
    shutil.rmtree(ckpt.list_checkpoints(tmp_path / "run")[-1])  # as if killed after the step-4 checkpoint
    pretrain(TrainConfig.build(**settings))  # --resume auto
    again = [(r["step"], r["lr"], r["loss"]) for r in read_metrics(tmp_path / "run")]
    assert [s for s, *_ in again] == list(range(1, 9))
    assert again == whole  # the same rates and losses, as metrics.jsonl rounds them
    expected = [1e-2 * WarmupLinearDecay(2, 8, "cosine")(s) for s in range(1, 9)]  # the rate after step s
    assert [lr for _, lr, _ in whole] == pytest.approx(expected, abs=1e-6)  # (metrics.jsonl: 6 decimals)
