"""What attention sees of a batch: the padded path's key-padding bias (:func:`attention_bias`) or the unpadded
layout (:class:`Unpadded`), with which the encoder computes real tokens only.

A padded batch ``[B, T]`` becomes ``N`` rows, the real tokens in batch order, followed by ``Nq - N`` filler rows
so that ``Nq`` is a multiple of :data:`QUANTUM` (compiled graphs and CUDA kernels then see few distinct shapes;
at least one filler row, so the filler is never an empty segment). Embeddings, QKV, the FFN and every LayerNorm
run on ``[Nq, H]``; only attention needs to know where a sequence ends:

- CUDA, half precision, no attention dropout: ``torch.nn.attention.varlen.varlen_attn`` over ``cu_seqlens``
  (Flash Attention; the filler rows are one more segment, attending among themselves);
- the CPU (not compiled): one ``scaled_dot_product_attention`` per sequence, no mask;
- otherwise (CUDA in fp32 or with attention dropout, ``torch.compile`` on the CPU, an older torch): q, k and v
  are scattered back to ``[B, T]`` for the attention alone, which runs as the padded path's with the key-padding
  bias, and the context is gathered back: exactly the padded computation for every real token, only the
  token-wise layers unpadded.

The plan (:func:`plan`) is built from the attention mask on the host, where the loader makes the batch
(:func:`bertstream.trainer.data.collate.unpack`), so that the step never reads a device tensor to learn N.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor

_varlen: ModuleType | None
try:  # torch's Flash Attention over cu_seqlens (2.10 and later); the CPU has the dense path
    from torch.nn.attention import varlen as _varlen
except ImportError:  # pragma: no cover - older torch
    _varlen = None

__all__ = [
    "PLAN_KEYS",
    "QUANTUM",
    "Unpadded",
    "attention_bias",
    "attention_dtype",
    "per_sequence",
    "plan",
    "sizes",
    "rows",
    "uses_varlen",
]

QUANTUM = 64
PLAN_KEYS = ("unpad_index", "unpad_inverse", "cu_seqlens")
# The CPU's per-sequence attention splits the rows by each sequence's length (then the filler's): plain ints the
# loader counted on the host (collate.Counts.lengths), put beside the tensors by the training step, so that no
# tensor is read into Python in a step (cu_seqlens.tolist() was, every layer of every step).
SIZES_KEY = "unpad_sizes"
_HALF = (torch.float16, torch.bfloat16)


def rows(real_tokens: int, quantum: int = QUANTUM) -> int:
    """Rows the unpadded encoder computes for ``real_tokens``: the next multiple of ``quantum`` above it."""
    return (real_tokens // quantum + 1) * quantum


def sizes(lengths: Sequence[int], quantum: int = QUANTUM) -> list[int]:
    """The row counts the per-sequence attention splits into: each sequence's real tokens, then the filler's."""
    n = sum(lengths)
    return [*lengths, rows(n, quantum) - n]


def plan(attention_mask: Tensor, quantum: int = QUANTUM) -> dict[str, Tensor]:
    """Index tensors of the unpadded layout of a ``[B, T]`` mask (1 = real token; real tokens first in a row).

    ``unpad_index`` [Nq] int64: row -> position in the flattened ``[B*T]`` batch (filler rows: 0);
    ``unpad_inverse`` [B*T] int64: position -> row (padding: Nq, a zero row appended by the attention);
    ``cu_seqlens`` [B+2] int32: where each sequence's rows start, then N (the filler's start), then Nq.
    On the CPU this is a few microseconds; on CUDA it reads N back (the loader builds it on the host instead).
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be [batch, seq], got shape {tuple(attention_mask.shape)}")
    keep = attention_mask.reshape(-1).bool()
    real = keep.nonzero().squeeze(1)  # [N]
    n = real.numel()
    nq = rows(n, quantum)
    index = torch.cat((real, real.new_zeros(nq - n)))
    inverse = torch.full((keep.numel(),), nq, dtype=torch.int64, device=keep.device)
    inverse[real] = torch.arange(n, device=keep.device)
    lengths = attention_mask.bool().sum(1)  # [B]
    cu = torch.zeros(lengths.numel() + 2, dtype=torch.int32, device=keep.device)
    torch.cumsum(lengths, 0, out=cu[1:-1])
    cu[-1] = nq
    return {"unpad_index": index, "unpad_inverse": inverse, "cu_seqlens": cu}


def uses_varlen(device: torch.device, dtype: torch.dtype, attention_dropout: float) -> bool:
    """Whether attention runs as varlen Flash Attention (else the dense ``[B, T]`` scatter; see the module)."""
    return _varlen is not None and device.type == "cuda" and dtype in _HALF and attention_dropout == 0.0


def attention_bias(attention_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """[B, T] (1/True = real token) -> additive bias [B, 1, 1, T] of ``dtype``: 0 for real keys, the dtype's
    most negative finite value for padding; SDPA broadcasts it over heads and queries.

    An additive mask in the attention's own dtype rather than a bool one: SDPA turns bool masks into -inf
    biases and then guards fully masked rows, which costs measurably on the CPU math path (training with
    attention dropout). Finite, so even an all-padding row yields numbers rather than NaN.
    """
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be [batch, seq], got shape {tuple(attention_mask.shape)}")
    keep = attention_mask.bool()
    bias = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, torch.finfo(dtype).min)
    return bias[:, None, None, :]


def attention_dtype(x: Tensor) -> torch.dtype:
    # Under autocast the projections (hence q, k, v) run in the autocast dtype, not in x's dtype.
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


def per_sequence(device: torch.device, dtype: torch.dtype, attention_dropout: float, *, compiled: bool) -> bool:
    """Whether attention runs over each sequence alone (varlen on CUDA, a loop on the CPU) rather than over the
    dense ``[B, T, T]``: what the FLOPs of a step count (``model_config.batch_flops``)."""
    return not compiled if device.type == "cpu" else uses_varlen(device, dtype, attention_dropout)


@dataclass(slots=True)
class Unpadded:
    """What attention needs to know about an unpadded batch (the encoder's ``mask`` argument)."""

    batch: int  # B
    width: int  # T
    index: Tensor  # [Nq]
    inverse: Tensor  # [B*T]
    cu_seqlens: Tensor  # [B+2] int32
    bias: Tensor | None = None  # [B, 1, 1, T] additive key-padding bias of the dense path (model.attention_bias)
    split: list[int] | None = None  # SIZES_KEY's row counts, where the batch brought them (the host's)

    @classmethod
    def of(cls, batch: Mapping[str, Any], device: torch.device) -> Unpadded:
        b, t = batch["input_ids"].shape
        keys = batch if PLAN_KEYS[0] in batch else plan(batch["attention_mask"])
        index, inverse, cu = (keys[k].to(device, non_blocking=True) for k in PLAN_KEYS)
        # not under torch.compile: a list of ints is a guard on each value (a graph per batch composition)
        split = None if torch.compiler.is_compiling() else batch.get(SIZES_KEY)
        return cls(b, t, index, inverse, cu, split=split)

    def gather(self, dense: Tensor) -> Tensor:
        """``[B, T, ...]`` -> ``[Nq, ...]`` (filler rows copy position 0)."""
        return dense.reshape(self.batch * self.width, *dense.shape[2:])[self.index]

    def attend(self, qkv: Tensor, heads: int, dropout_p: float) -> Tensor:
        """``qkv`` [Nq, 3H] (q, k, v side by side) -> attention context [Nq, H] within each sequence."""
        nq, three_h = qkv.shape
        h = three_h // 3
        d = h // heads
        if uses_varlen(qkv.device, qkv.dtype, dropout_p):
            assert _varlen is not None
            q, k, v = qkv.view(nq, 3, heads, d).unbind(1)  # [Nq, heads, d] each
            width = max(self.width, QUANTUM)  # bounds every segment (the filler's too) without a host read
            cu = self.cu_seqlens
            out = cast(
                Tensor, _varlen.varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, width, width)
            )
            return out.reshape(nq, h)
        if qkv.device.type == "cpu" and not torch.compiler.is_compiling():
            return self._attend_each(qkv, heads, dropout_p)
        b, t = self.batch, self.width
        # Padding slots read the appended zero row; their keys are masked by the bias, their queries dropped.
        dense = torch.cat((qkv, qkv.new_zeros(1, three_h)))[self.inverse]  # [B*T, 3H]
        q, k, v = dense.view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)  # [B, heads, T, d]
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias, dropout_p=dropout_p)
        return ctx.transpose(1, 2).reshape(b * t, h)[self.index]  # [Nq, H]

    def _attend_each(self, qkv: Tensor, heads: int, dropout_p: float) -> Tensor:
        """The CPU's varlen attention: one ``scaled_dot_product_attention`` per sequence (and one for the filler),
        no mask, so padding costs nothing here either. The boundaries are read from a host tensor: no device
        sync; not under ``torch.compile`` (a graph per batch composition), which takes the dense path."""
        h = qkv.shape[1] // 3
        d = h // heads
        split = self.split
        if split is None:  # a batch built by hand (tests, tools): read its boundaries
            bounds = self.cu_seqlens.tolist()
            split = [e - s for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
        ctx = []
        # split, not slices: its backward is one concatenation, where each slice's would fill a zero [Nq, 3H]
        for piece in qkv.split(split):  # [n, 3H]
            n = piece.shape[0]
            q, k, v = piece.view(n, 3, heads, d).permute(1, 2, 0, 3)  # [heads, n, d] each
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)  # [heads, n, d]
            ctx.append(out.transpose(0, 1).reshape(n, h))
        return torch.cat(ctx)  # [Nq, H]

    def first_rows(self) -> Tensor:
        """[B] row of each sequence's first token ([CLS])."""
        return self.cu_seqlens[: self.batch].long()

    def rows_at(self, positions: Tensor) -> Tensor:
        """``[B, P]`` positions in the padded batch -> ``[B, P]`` rows."""
        return self.inverse.view(self.batch, self.width).gather(1, positions)
