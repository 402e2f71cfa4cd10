"""A resume with a larger ``--max-steps`` re-plans the schedule of every parameter group, not only the first."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from bertstream.trainer.optim.schedule import build_scheduler
from bertstream.trainer.pretrain.resume import extend_schedule, group_rates
from tests.trainer.pretrain.test_loop import train

MICRO = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}


def test_extending_the_schedule_moves_every_groups_rate():
    a, b = torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b]}], lr=1.0)
    sched = build_scheduler(opt, 2, 10)
    for _ in range(10):
        opt.step()
        sched.step()
    assert [g["lr"] for g in opt.param_groups] == [0.0, 0.0]  # the end of the planned run
    assert extend_schedule(sched, 2, 20) == 10
    for _ in range(3):
        opt.step()
        sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([7 / 18, 7 / 18])  # (20 - 13) / (20 - 2)
    assert group_rates(opt) == "2 groups: 0.389 (1 tensors), 0.389 (1 tensors)"


def test_a_checkpoint_with_one_group_on_the_old_end_is_mended_on_resume():
    # What the earlier extension saved: group 0 on the new end, the others still on the old one.
    opt = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))]} for _ in range(2)], lr=1.0)
    sched = build_scheduler(opt, 2, 10)
    state = sched.state_dict()
    state["lr_lambdas"] = [
        {"warmup": 2, "total": 20, "schedule": "linear"},
        {"warmup": 2, "total": 10, "schedule": "linear"},
    ]
    sched.lr_lambdas = [type(sched.lr_lambdas[0])(2, 10), type(sched.lr_lambdas[0])(2, 10)]
    sched.load_state_dict(state)
    assert extend_schedule(sched, 2, 20) == 10
    assert all(f.total == 20 for f in sched.lr_lambdas)


def test_every_tensor_trains_after_a_resume_with_a_larger_max_steps(demo_shards, tmp_path):
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    run = tmp_path / "run"
    kw = {"model_config": str(config), "warmup_steps": 2}
    train(demo_shards, run, max_steps=4, checkpoint_every=4, **kw)  # the rate is 0 at step 4, the end of its decay
    train(demo_shards, run, max_steps=7, checkpoint_every=1, **kw)
    # From step 5 on: the first step after the resume took the re-planned rate in every group, the old
    # schedule put the second group back to 0 at the step after it.
    before = load_file(str(run / "checkpoints" / "step-0000005" / "model.safetensors"))
    after = load_file(str(run / "checkpoints" / "step-0000007" / "model.safetensors"))
    frozen = sorted(name for name in before if torch.equal(before[name], after[name]))
    assert not frozen, f"{len(frozen)} of {len(before)} tensors never changed after the resume: {frozen[:5]}"
