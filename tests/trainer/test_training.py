"""``training.load_state``: a state that does not fit its model is named in one line; ``Training``'s step skips a
non-finite gradient on the device."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from bertstream.trainer.errors import RunError
from bertstream.trainer.training import Diverged, Training, load_state


def test_weights_that_do_not_fit_name_what_is_missing_extra_or_of_another_shape():
    """Issue 44, new case: a fine-tuning checkpoint given to pretrain --init-from (or --resume --reset-optimizer)
    said only "Error(s) in loading state_dict for BertForPreTraining:", torch's first line."""
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    good = {k: v.clone() for k, v in model.state_dict().items()}
    load_state(model, good, "weights", "ckpt", strict=True)
    other = {**good, "head.weight": torch.zeros(1)}
    del other["1.bias"]
    with pytest.raises(
        RunError, match=r"ckpt: its weights do not fit .*\(lacks 1: 1.bias; has others 1: head.weight\)"
    ):
        load_state(model, other, "weights", "ckpt", strict=True)
    with pytest.raises(RunError, match=r"other shapes 1: 0.weight \(2, 2\), the model's \(3, 2\)"):
        load_state(model, {**good, "0.weight": torch.zeros(2, 2)}, "weights", "ckpt", strict=True)


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_a_non_finite_gradient_skips_the_update_on_the_device_and_is_raised_at_check(name):
    from bertstream.trainer.model import BertConfig, BertForPreTraining
    from bertstream.trainer.optim.schedule import build_scheduler
    from bertstream.trainer.optim.table import build_optimizer

    config = BertConfig(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=16)
    model = BertForPreTraining(config)
    optimizer = build_optimizer(model, name, 1e-2, 0.01)
    training = Training(model, model, optimizer, build_scheduler(optimizer, 0, 10, "linear"), 1.0)

    def grads(value: float | None = None) -> None:
        gen = torch.Generator().manual_seed(training.step)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen)
        if value is not None:
            next(model.parameters()).grad[0, 0] = value

    grads()
    training.optimizer_step()
    training.check()  # a good step: nothing to say
    weights = copy.deepcopy(model.state_dict())
    state = copy.deepcopy(optimizer.state_dict()["state"])
    for bad in (float("nan"), float("inf"), 1.0):  # a NaN step, an inf one, then a good one: all skipped
        grads(bad)
        training.optimizer_step()
    assert training.step == 4  # the host did not know
    for k, v in weights.items():
        assert torch.equal(v, model.state_dict()[k]), k
    for i, s in state.items():
        for k, v in s.items():
            assert torch.equal(v, optimizer.state_dict()["state"][i][k]), (name, i, k)
    with pytest.raises(Diverged, match=r"training diverged at step 2: the loss or its gradient is nan"):
        training.check()
