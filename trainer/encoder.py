"""BERT's encoder: multi-head self-attention (one GEMM for query, key and value), the feed-forward block,
post-LN (BERT's) or pre-LN residuals, over a padded batch or the unpadded layout (``trainer.unpad``); with
``position_embedding_type="rope"``, queries and keys turned by their position (:func:`rotate_qk`) before
attention, whichever path (SDPA, varlen, the CPU's per-sequence loop) then computes it.

The query, key and value projections stay three ``nn.Linear`` modules as in HF, but are applied as one GEMM
on their concatenated weights: one matrix multiply instead of three, at the cost of a [3H, H] copy per layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.unpad import Unpadded, attention_dtype

Mask = Tensor | Unpadded | None  # the encoder's: padded bias [B, 1, 1, T], the unpadded layout, or none
Rotary = tuple[Tensor, Tensor]  # RoPE's cos and sin [..., 1, 1, head/2] per token (see rotary_tables)

ROPE_BASE = 10000.0  # RoFormer's (and LLaMA's): wavelengths from 2*pi to 10000*2*pi positions


def rotary_tables(positions: Tensor, head_size: int, dtype: torch.dtype) -> Rotary:
    """cos and sin of each token's angles: ``positions`` [*] (int) -> two [*, 1, 1, head/2] tensors of ``dtype``.

    The angles are computed in float32 and cast after: in bfloat16, position 500's fastest angle would be off by
    up to a radian. Computed once per forward, not per layer, and never stored: a buffer would not survive the
    meta-device construction (``weights_init.construct_then_init``) nor belong in a checkpoint."""
    exponents = torch.arange(0, head_size, 2, device=positions.device, dtype=torch.float32) / head_size
    angles = positions.to(torch.float32)[..., None, None, None] * ROPE_BASE**-exponents  # [*, 1, 1, head/2]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_qk(qkv: Tensor, rotary: Rotary, heads: int) -> Tensor:
    """``qkv`` [..., 3H] (q, k, v side by side, as the fused projection makes it) with q and k turned by their
    tokens' positions, v as is. A head's dimensions i and i + head/2 turn as one pair (GPT-NeoX's layout, Hugging
    Face's ``rotate_half``); ``rotary``'s leading dimensions are ``qkv``'s without the batch ([T] or [Nq])."""
    cos, sin = rotary
    *lead, three_h = qkv.shape
    parts = qkv.view(*lead, 3, heads, three_h // (3 * heads))  # [..., 3, heads, head]
    a, b = parts[..., :2, :, :].chunk(2, dim=-1)  # q and k halves: [..., 2, heads, head/2] each
    turned = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)  # [..., 2, heads, head]
    return torch.cat((turned, parts[..., 2:, :, :]), dim=-3).view(*lead, three_h)


class BertSelfAttention(nn.Module):
    """Multi-head self-attention, computed by ``scaled_dot_product_attention``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_size = config.head_size
        self.dropout_p = config.attention_dropout
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor, mask: Mask, rotary: Rotary | None = None) -> Tensor:
        # x: [B, T, H]; mask: additive bias [B, 1, 1, T] (see attention_bias) or None. Unpadded: x [Nq, H]
        weight = torch.cat((self.query.weight, self.key.weight, self.value.weight))  # [3H, H]
        bias = torch.cat((self.query.bias, self.key.bias, self.value.bias))  # [3H]
        qkv = F.linear(x, weight, bias)  # [B, T, 3H] or [Nq, 3H]
        if rotary is not None:
            qkv = rotate_qk(qkv, rotary, self.num_heads)
        if isinstance(mask, Unpadded):
            return mask.attend(qkv, self.num_heads, self.dropout_p if self.training else 0.0)
        b, t, h = x.shape
        # [B,T,3H] -> [3, B, heads, T, head]; views only, SDPA accepts the strides
        q, k, v = qkv.view(b, t, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4).unbind(0)
        ctx = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0
        )  # [B, heads, T, head]
        return ctx.transpose(1, 2).reshape(b, t, h)


class ResidualOutput(nn.Module):
    """A sublayer's projection back to the hidden size + residual. Post-LN normalises the sum; pre-LN applies the
    same ``LayerNorm`` to the sublayer's input instead (:meth:`sublayer_input`), so both placements have the same
    parameter names (``dense``, ``LayerNorm``: Hugging Face's)."""

    def __init__(self, config: BertConfig, in_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.pre_ln = config.pre_ln

    def sublayer_input(self, x: Tensor) -> Tensor:
        """What the sublayer reads of the residual stream ``x``: pre-LN normalises it, post-LN reads it as is."""
        return self.LayerNorm(x) if self.pre_ln else x

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        # x: the sublayer's output [..., in_size]; residual: [..., H] -> [..., H]
        out = self.dropout(self.dense(x)) + residual
        return out if self.pre_ln else self.LayerNorm(out)


class BertSelfOutput(ResidualOutput):
    """The attention's output onto the residual stream: [..., H] -> [..., H]."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, config.hidden_size)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, mask: Mask, rotary: Rotary | None = None) -> Tensor:
        return self.output(self.self(self.output.sublayer_input(x), mask, rotary), x)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        assert config.intermediate_size is not None
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.dense(x))  # exact (erf) GELU, HF "gelu"


class BertOutput(ResidualOutput):
    """The feed-forward block's output onto the residual stream: [..., intermediate] -> [..., H]."""

    def __init__(self, config: BertConfig) -> None:
        assert config.intermediate_size is not None
        super().__init__(config, config.intermediate_size)


class BertLayer(nn.Module):
    """Transformer block. Post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    Pre-LN: x = x + Attn(LN(x)); x = x + FFN(LN(x)), with one more LN after the last block (``BertEncoder``)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: Tensor, mask: Mask, rotary: Rotary | None = None) -> Tensor:
        x = self.attention(x, mask, rotary)
        return self.output(self.intermediate(self.output.sublayer_input(x)), x)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))
        # pre-LN leaves the residual stream unnormalised: the heads read it through this last LN
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.pre_ln else None
        self.rope = config.rope
        self.head_size = config.head_size

    def rotary(self, x: Tensor, mask: Mask) -> Rotary | None:
        """RoPE's tables for the tokens of ``x`` (None for absolute positions): padded, position t of each row;
        unpadded, each row's place in its sequence (real tokens come first in a row; filler rows: 0)."""
        if not self.rope:
            return None
        if isinstance(mask, Unpadded):
            positions = mask.index % mask.width  # [Nq]
        else:
            positions = torch.arange(x.shape[1], device=x.device)  # [T]
        return rotary_tables(positions, self.head_size, attention_dtype(x))

    def forward(self, x: Tensor, mask: Mask) -> Tensor:
        rotary = self.rotary(x, mask)
        for layer in self.layer:
            x = layer(x, mask, rotary)
        return x if self.final_layer_norm is None else self.final_layer_norm(x)

    def all_states(self, x: Tensor, mask: Mask) -> list[Tensor]:
        """The input and every layer's output (``num_layers + 1`` tensors), as HF's ``output_hidden_states``
        (pre-LN: the last one after the final LN, as ``forward`` returns it)."""
        states, rotary = [x], self.rotary(x, mask)
        for layer in self.layer:
            states.append(layer(states[-1], mask, rotary))
        if self.final_layer_norm is not None:
            states[-1] = self.final_layer_norm(states[-1])
        return states
