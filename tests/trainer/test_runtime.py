"""``runtime.load_state``: a state that does not fit its model is named in one line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertstream.trainer.errors import RunError
from bertstream.trainer.runtime import load_state


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
