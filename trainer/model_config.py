"""A BERT model's configuration: the architecture (``BertConfig``), the named presets, dropout as a training
choice, and what one pretraining sequence costs in FLOPs. The modules are ``bertstream.trainer.model``'s."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = [
    "NORM_PLACEMENTS",
    "POSITION_EMBEDDINGS",
    "PRESETS",
    "PRESET_NAMES",
    "BertConfig",
    "bert_base",
    "bert_large",
    "bert_medium",
    "bert_mini",
    "bert_small",
    "bert_tiny",
    "batch_flops",
    "check_fits_in_memory",
    "find_preset",
    "parameter_count",
    "pretraining_flops",
    "with_dropout",
]

NORM_PLACEMENTS = ("post", "pre")
POSITION_EMBEDDINGS = ("absolute", "rope")


@dataclass(frozen=True, kw_only=True)
class BertConfig:
    """Architecture and regularisation of a BERT model. ``intermediate_size=None`` means ``4 * hidden_size``."""

    vocab_size: int
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int | None = None
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    # "post": BERT's LN(x + f(x)), what Hugging Face's BertModel holds. "pre": x + f(LN(x)) with a final LN
    # after the last layer (Cramming, 24hBERT): trains stably at the high learning rates a short budget needs.
    norm_placement: str = "post"
    # "absolute": BERT's learned position embeddings, added to the tokens'. "rope": rotary embeddings (RoFormer,
    # Su et al. 2021) turn each query and key by its position in attention instead; no position matrix, and no
    # transformers BERT class holds it (export-hf refuses it). max_position_embeddings still bounds the length.
    position_embedding_type: str = "absolute"

    def __post_init__(self) -> None:
        if self.intermediate_size is None:
            object.__setattr__(self, "intermediate_size", 4 * self.hidden_size)
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"BertConfig.hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}"
            )
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"BertConfig.{name} must be a probability in [0, 1), got {value!r}")
        for name in ("layer_norm_eps", "initializer_range"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"BertConfig.{name} must be a positive number, got {value!r}")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(
                f"BertConfig.norm_placement must be one of {', '.join(NORM_PLACEMENTS)}, got {self.norm_placement!r}"
            )
        if self.position_embedding_type not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"BertConfig.position_embedding_type must be one of {', '.join(POSITION_EMBEDDINGS)}, "
                f"got {self.position_embedding_type!r}"
            )
        if self.rope and self.head_size % 2:
            raise ValueError(
                f"BertConfig.position_embedding_type='rope' turns pairs of a head's dimensions: head size "
                f"{self.head_size} (hidden_size {self.hidden_size} / num_heads {self.num_heads}) must be even"
            )
        if isinstance(self.pad_token_id, bool) or not isinstance(self.pad_token_id, int):
            raise ValueError(f"BertConfig.pad_token_id must be an integer, got {self.pad_token_id!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"BertConfig.pad_token_id={self.pad_token_id} is outside the vocabulary [0, {self.vocab_size})"
            )
        check_fits_in_memory(self)

    @property
    def pre_ln(self) -> bool:
        return self.norm_placement == "pre"

    @property
    def rope(self) -> bool:
        return self.position_embedding_type == "rope"

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    def too_long(self, data: str, longest: int, *, otherwise: str = "") -> str | None:
        """One line when ``data`` (the flag and folder the caller names) holds sequences of up to ``longest``
        tokens, more than the model's positions: they would crash at the first long batch, so the run is refused
        at start with the way out, ``bertprep``'s --max-seq-length (``otherwise``: the caller's other one). None
        when they fit. Pretraining, fine-tuning and ``embed`` of a task folder ask this one check."""
        if longest <= self.max_position_embeddings:
            return None
        return (
            f"{data} holds sequences of up to {longest} tokens but the model has {self.max_position_embeddings} "
            f"positions (max_position_embeddings): rebuild the data with a smaller bertprep --max-seq-length{otherwise}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BertConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"BertConfig: unknown key(s) {unknown}; known keys are {sorted(known)}")
        if "vocab_size" not in data:
            raise ValueError("BertConfig: 'vocab_size' is required")
        return cls(**dict(data))


def bert_tiny(vocab_size: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, num_layers=2, hidden_size=128, num_heads=2)


def bert_mini(vocab_size: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, num_layers=4, hidden_size=256, num_heads=4)


def bert_small(vocab_size: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, num_layers=4, hidden_size=512, num_heads=8)


def bert_medium(vocab_size: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, num_layers=8, hidden_size=512, num_heads=8)


def bert_base(vocab_size: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, num_layers=12, hidden_size=768, num_heads=12)


def bert_large(vocab_size: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, num_layers=24, hidden_size=1024, num_heads=16)


def with_dropout(config: BertConfig, dropout: float | None) -> BertConfig:
    """``config`` with hidden and attention dropout set to ``dropout`` (None: unchanged).

    Dropout is a training choice rather than architecture: a short pretraining run sees each instance at most
    once and learns faster without it, while fine-tuning on a few thousand rows wants it back.
    """
    return config if dropout is None else replace(config, hidden_dropout=dropout, attention_dropout=dropout)


# The one preset registry: ``--model`` and ``random:PRESET`` choose from its names.
PRESETS: dict[str, Callable[[int], BertConfig]] = {
    "tiny": bert_tiny,
    "mini": bert_mini,
    "small": bert_small,
    "medium": bert_medium,
    "base": bert_base,
    "large": bert_large,
}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)


def find_preset(name: str) -> Callable[[int], BertConfig] | None:
    """The preset called ``name`` (``mini``; also ``bert_mini``, the function's name), or None."""
    return PRESETS.get(name.removeprefix("bert_"))


# ---------------------------------------------------------------------------------------------- FLOPs


def parameter_count(config: BertConfig) -> int:
    """Parameters of ``BertForPreTraining(config)`` (encoder, pooler, MLM and NSP heads; the decoder is tied),
    computed without allocating any."""
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    assert i is not None
    positions = 0 if config.rope else config.max_position_embeddings
    embeddings = (v + positions + config.type_vocab_size) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
    heads = (h * h + h) + (h * h + h + 2 * h + v) + (2 * h + 2)  # pooler, MLM transform + bias, NSP
    return embeddings + config.num_layers * layer + heads + (2 * h if config.pre_ln else 0)


def memory_bytes() -> int:
    """This machine's physical memory (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_fits_in_memory(config: BertConfig) -> None:
    """Refuse, before anything is allocated, a model whose fp32 weights alone exceed this machine's memory
    (``num_layers`` 10**6 or ``hidden_size`` 10**9 from a config file hung or asked for terabytes); training
    needs about four times that (weights, gradients, two Adam moments)."""
    n = parameter_count(config)
    total = memory_bytes()
    if total and 4 * n > total:
        raise ValueError(
            f"BertConfig: {n:,} parameters (hidden_size {config.hidden_size}, num_layers {config.num_layers}, "
            f"vocab_size {config.vocab_size}) need {4 * n / 2**30:,.0f} GiB in fp32 alone, more than this "
            f"machine's {total / 2**30:,.0f} GiB of memory"
        )


def pretraining_flops(config: BertConfig, seq_len: int, num_masked: int, *, backward: bool = True) -> int:
    """Floating-point operations of one pretraining sequence (a multiply-add counts 2).

    Forward, with T = ``seq_len``, P = ``num_masked``, H, I (intermediate), V (vocab), L layers::

        per layer   2*T*(3*H*H + H*H + 2*H*I)     QKV, attention output, two FFN matmuls
                  + 4*T*T*H                       Q @ K^T and softmax(.) @ V over all heads
        pooler+NSP  2*(H*H + 2*H)                 one [CLS] vector per sequence
        MLM head    2*P*(H*H + H*V)               transform + tied decoder, masked positions only

    The matmul part is the usual ``2 * N * tokens`` with N the parameters used per token. Backward costs twice
    the forward (gradients for inputs and weights), so with ``backward=True`` the result is 3x the forward,
    i.e. the ``6 * N * tokens`` rule plus attention terms. Embedding lookups, rotary turns (RoPE), LayerNorm,
    softmax, GELU and the loss are excluded, as is conventional for MFU. Padding counts: pass the padded length the
    model sees.
    """
    if seq_len < 1 or num_masked < 0:
        raise ValueError(f"seq_len must be >= 1 and num_masked >= 0, got seq_len={seq_len}, num_masked={num_masked}")
    token, pair, sequence, prediction = _flop_terms(config)
    forward = seq_len * token + seq_len * seq_len * pair + sequence + num_masked * prediction
    return 3 * forward if backward else forward


def _flop_terms(config: BertConfig) -> tuple[int, int, int, int]:
    """Forward FLOPs per token row, per attention (query, key) pair, per sequence and per predicted position."""
    h, i, v, n = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_layers
    assert i is not None
    return n * 2 * (3 * h * h + h * h + 2 * h * i), n * 4 * h, 2 * (h * h + 2 * h), 2 * (h * h + h * v)


def batch_flops(
    config: BertConfig,
    lengths: Sequence[int],
    masked: Sequence[int],
    shape: tuple[int, int],
    *,
    rows: int | None,
    varlen: bool,
) -> tuple[int, int]:
    """``(useful, computed)`` FLOPs (forward and backward) of one pretraining batch of ``shape`` (T, P).

    ``useful``: each sequence at its real length (``lengths``), its real masked positions (``masked``) only:
    what MFU counts. ``computed``: what the model ran, padding included (HFU): ``rows`` token rows when
    unpadded (``trainer.unpad.rows``) or B*T when padded (``rows=None``); attention over each sequence alone
    (``varlen``, the filler segment included) or over the padded ``[B, T, T]``; P prediction slots per sequence.
    """
    token, pair, sequence, prediction = _flop_terms(config)
    t, p = shape
    b = len(lengths)
    real = sum(lengths)
    useful = real * token + sum(n * n for n in lengths) * pair + b * sequence + sum(masked) * prediction
    if rows is None:
        computed = b * (t * token + t * t * pair + sequence + p * prediction)
    else:
        pairs = sum(n * n for n in lengths) + (rows - real) ** 2 if varlen else b * t * t
        computed = rows * token + pairs * pair + b * sequence + b * p * prediction
    return 3 * useful, 3 * computed
