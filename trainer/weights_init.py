"""Reproducible initialisation, the model-independent part: named seed streams, and modules built on the meta
device first so that no weight is initialised twice (``bertstream.trainer.model.seeded_init`` draws the BERT weights)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["construct_then_init", "derive_seed"]


def derive_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for one named stream of ``seed`` (independent of how other streams are consumed)."""
    digest = hashlib.blake2b(f"{seed}/{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def construct_then_init(module: nn.Module, build: Callable[[], None], init: Callable[[], None]) -> None:
    """Run ``build`` (which creates submodules) on the meta device, then materialise on CPU and ``init``.

    Skips PyTorch's default per-layer init, which would draw from the global RNG (and waste time); the module
    is initialised on CPU, then moves to the default device (e.g. inside ``with torch.device("cuda")``).
    Under a meta default device it stays shape-only, which is also how a nested call (BertModel inside
    BertForPreTraining) leaves the init to its outermost caller.
    """
    device = torch.get_default_device()
    with torch.device("meta"):
        build()
    if device.type == "meta":
        return
    module.to_empty(device="cpu")
    init()
    if device.type != "cpu":
        module.to(device)
