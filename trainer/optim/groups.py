"""Parameter groups of every optimizer in the table: no weight decay on biases and LayerNorm weights (as BERT), and
ELECTRA's layer-wise rate decay. Reads parameter names only, so any optimizer takes the same groups."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

_LAYER = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")


def depth(name: str, num_layers: int) -> int:
    """How far from the output a parameter sits: embeddings 0, encoder layer i (0-based) i + 1, everything
    else (pooler, task heads) ``num_layers + 1``."""
    if ".embeddings." in f".{name}":
        return 0
    m = _LAYER.search(name)
    return int(m.group(1)) + 1 if m else num_layers + 1


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float = 1.0) -> list[dict]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (as BERT). ``layer_decay`` < 1 scales
    each group's rate by ``layer_decay ** (L + 1 - depth)`` (ELECTRA's layer-wise decay): layers near the
    input, whose pretrained features are the most general, move least. Each group's ``lr_scale`` multiplies
    the optimizer's rate."""
    num_layers = 1 + max((int(m.group(1)) for n, _ in model.named_parameters() if (m := _LAYER.search(n))), default=-1)
    groups: dict[tuple[int, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        no_decay = p.ndim < 2 or "LayerNorm" in name or name.endswith(".bias")
        # Without decay every parameter is at the head's depth: BERT's two groups, decayed first.
        d = depth(name, num_layers) if layer_decay != 1.0 else num_layers + 1
        groups.setdefault((d, no_decay), []).append(p)
    return [
        {"params": params, "weight_decay": 0.0 if nd else weight_decay, "lr_scale": layer_decay ** (num_layers + 1 - d)}
        for (d, nd), params in sorted(groups.items(), key=lambda kv: kv[0])
    ]
