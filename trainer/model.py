"""BERT (Devlin et al., 2018) for pretraining: encoder, pooler, MLM and NSP heads.

Parameter names and shapes are Hugging Face ``transformers.BertForPreTraining``'s, one to one: our
``named_parameters()`` equal HF's (which lists tied parameters once). The MLM decoder weight is the word
embedding matrix itself and its bias is ``cls.predictions.bias``, so the state dict has no
``cls.predictions.decoder.*`` entries (HF's are aliases of those two tensors).

The query, key and value projections stay three ``nn.Linear`` modules as in HF, but are applied as one GEMM
on their concatenated weights: one matrix multiply instead of three, at the cost of a [3H, H] copy per layer.

MLM logits are computed only at ``masked_lm_positions``: hidden states are gathered there before the
transform and the vocabulary projection, which is what makes a step cheaper than HF's (which projects every
position onto the vocabulary).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "BATCH_KEYS",
    "NORM_PLACEMENTS",
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "BertForPreTraining",
    "BertModel",
    "BertPreTrainingHeads",
    "PRESETS",
    "attention_bias",
    "bert_base",
    "bert_large",
    "bert_medium",
    "bert_mini",
    "bert_small",
    "bert_tiny",
    "construct_then_init",
    "derive_seed",
    "gather_positions",
    "init_bert_weights",
    "num_parameters",
    "pretraining_flops",
    "seeded_init",
    "with_dropout",
]

BATCH_KEYS = (
    "input_ids",
    "token_type_ids",
    "attention_mask",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


# --------------------------------------------------------------------------------------------- config

NORM_PLACEMENTS = ("post", "pre")


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
        if isinstance(self.pad_token_id, bool) or not isinstance(self.pad_token_id, int):
            raise ValueError(f"BertConfig.pad_token_id must be an integer, got {self.pad_token_id!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"BertConfig.pad_token_id={self.pad_token_id} is outside the vocabulary [0, {self.vocab_size})"
            )

    @property
    def pre_ln(self) -> bool:
        return self.norm_placement == "pre"

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

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


PRESETS: dict[str, Callable[[int], BertConfig]] = {
    "bert_tiny": bert_tiny,
    "bert_mini": bert_mini,
    "bert_small": bert_small,
    "bert_medium": bert_medium,
    "bert_base": bert_base,
    "bert_large": bert_large,
}


# ---------------------------------------------------------------------------------------------- FLOPs


def pretraining_flops(config: BertConfig, seq_len: int, num_masked: int, *, backward: bool = True) -> int:
    """Floating-point operations of one pretraining sequence (a multiply-add counts 2).

    Forward, with T = ``seq_len``, P = ``num_masked``, H, I (intermediate), V (vocab), L layers::

        per layer   2*T*(3*H*H + H*H + 2*H*I)     QKV, attention output, two FFN matmuls
                  + 4*T*T*H                       Q @ K^T and softmax(.) @ V over all heads
        pooler+NSP  2*(H*H + 2*H)                 one [CLS] vector per sequence
        MLM head    2*P*(H*H + H*V)               transform + tied decoder, masked positions only

    The matmul part is the usual ``2 * N * tokens`` with N the parameters used per token. Backward costs twice
    the forward (gradients for inputs and weights), so with ``backward=True`` the result is 3x the forward,
    i.e. the ``6 * N * tokens`` rule plus attention terms. Embedding lookups, LayerNorm, softmax, GELU and the
    loss are excluded, as is conventional for MFU. Padding counts: pass the padded length the model sees.
    """
    if seq_len < 1 or num_masked < 0:
        raise ValueError(f"seq_len must be >= 1 and num_masked >= 0, got seq_len={seq_len}, num_masked={num_masked}")
    h, i, v, t, p = config.hidden_size, config.intermediate_size, config.vocab_size, seq_len, num_masked
    assert i is not None
    layer = 2 * t * (3 * h * h + h * h + 2 * h * i) + 4 * t * t * h
    forward = config.num_layers * layer + 2 * (h * h + 2 * h) + 2 * p * (h * h + h * v)
    return 3 * forward if backward else forward


# ------------------------------------------------------------------------------------------------ init


def _normal_(weight: Tensor, std: float, generator: torch.Generator | None) -> None:
    if weight.device.type == "cpu" and weight.dtype == torch.float32:
        nn.init.normal_(weight, 0.0, std, generator=generator)
    else:  # draw in float32 on CPU, so a seed means the same weights on every device and dtype
        weight.copy_(torch.empty(weight.shape, dtype=torch.float32).normal_(0.0, std, generator=generator))


@torch.no_grad()
def init_bert_weights(module: nn.Module, std: float, generator: torch.Generator | None = None) -> None:
    """BERT init: N(0, std) for linear and embedding weights, zero biases, LayerNorm ones/zeros.

    ``generator`` must be a CPU generator (or None: the global RNG). The padding row of the word embeddings
    starts at zero, as in Hugging Face.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            _normal_(m.weight, std, generator)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            _normal_(m.weight, std, generator)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, BertLMPredictionHead):
            nn.init.zeros_(m.bias)
    # after the loop: modules() visits BertEmbeddings before its word_embeddings child
    for m in module.modules():
        if isinstance(m, BertEmbeddings):
            m.word_embeddings.weight[m.pad_token_id].zero_()


def derive_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for one named stream of ``seed`` (independent of how other streams are consumed)."""
    digest = hashlib.blake2b(f"{seed}/{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def seeded_init(module: nn.Module, std: float, seed: int, stream: str) -> None:
    """BERT-initialise ``module`` from the stream ``stream`` of ``seed``; no global RNG state is touched."""
    param = next(module.parameters(), None)
    if param is None or param.is_meta:
        return  # meta tensors are shape-only: nothing to draw
    generator = torch.Generator()  # CPU: see _normal_
    generator.manual_seed(derive_seed(seed, stream))
    init_bert_weights(module, std, generator)


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


# ----------------------------------------------------------------------------------------------- model


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.pad_token_id = config.pad_token_id

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        # input_ids, token_type_ids: [B, T] -> [B, T, H]
        t = input_ids.shape[1]
        if t > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence length {t} exceeds max_position_embeddings={self.position_embeddings.num_embeddings}"
            )
        x = self.word_embeddings(input_ids) + self.position_embeddings.weight[:t]  # [B,T,H] + [T,H]
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


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

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        # x: [B, T, H]; mask: additive bias [B, 1, 1, T] (see attention_bias) or None
        b, t, h = x.shape
        weight = torch.cat((self.query.weight, self.key.weight, self.value.weight))  # [3H, H]
        bias = torch.cat((self.query.bias, self.key.bias, self.value.bias))  # [3H]
        # [B,T,3H] -> [3, B, heads, T, head]; views only, SDPA accepts the strides
        qkv = F.linear(x, weight, bias)
        q, k, v = qkv.view(b, t, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4).unbind(0)
        ctx = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0
        )  # [B, heads, T, head]
        return ctx.transpose(1, 2).reshape(b, t, h)


class BertSelfOutput(nn.Module):
    """Projection + residual. Post-LN normalises the sum; pre-LN applies the same ``LayerNorm`` to the
    sublayer's input instead (see ``BertAttention``), so both placements have the same parameter names."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.pre_ln = config.pre_ln

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        out = self.dropout(self.dense(x)) + residual
        return out if self.pre_ln else self.LayerNorm(out)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        inner = self.output.LayerNorm(x) if self.output.pre_ln else x
        return self.output(self.self(inner, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        assert config.intermediate_size is not None
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.dense(x))  # exact (erf) GELU, HF "gelu"


class BertOutput(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        assert config.intermediate_size is not None
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.pre_ln = config.pre_ln

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        out = self.dropout(self.dense(x)) + residual
        return out if self.pre_ln else self.LayerNorm(out)


class BertLayer(nn.Module):
    """Transformer block. Post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    Pre-LN: x = x + Attn(LN(x)); x = x + FFN(LN(x)), with one more LN after the last block (``BertEncoder``)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.attention(x, mask)
        inner = self.output.LayerNorm(x) if self.output.pre_ln else x
        return self.output(self.intermediate(inner), x)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))
        # pre-LN leaves the residual stream unnormalised: the heads read it through this last LN
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.pre_ln else None

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return x if self.final_layer_norm is None else self.final_layer_norm(x)

    def all_states(self, x: Tensor, mask: Tensor | None) -> list[Tensor]:
        """The input and every layer's output (``num_layers + 1`` tensors), as HF's ``output_hidden_states``
        (pre-LN: the last one after the final LN, as ``forward`` returns it)."""
        states = [x]
        for layer in self.layer:
            states.append(layer(states[-1], mask))
        if self.final_layer_norm is not None:
            states[-1] = self.final_layer_norm(states[-1])
        return states


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output: Tensor) -> Tensor:
        return torch.tanh(self.dense(sequence_output[:, 0]))  # [B, T, H] -> [B, H]


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


def _attention_dtype(x: Tensor) -> torch.dtype:
    # Under autocast the projections (hence q, k, v) run in the autocast dtype, not in x's dtype.
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


class BertModel(nn.Module):
    """Embeddings + encoder + pooler; the trunk every head (pretraining or fine-tuning) wraps as ``.bert``."""

    def __init__(self, config: BertConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config

        def build() -> None:
            self.embeddings = BertEmbeddings(config)
            self.encoder = BertEncoder(config)
            self.pooler = BertPooler(config)

        construct_then_init(self, build, lambda: self.reset_parameters(seed))

    def reset_parameters(self, seed: int = 0) -> None:
        # One stream per part, so a fresh pooler or head can be redrawn alone (see trainer.hf).
        for name, child in self.named_children():
            seeded_init(child, self.config.initializer_range, seed, f"bert.{name}")

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Returns ``(sequence_output [B, T, H], pooled_output [B, H])``."""
        x = self.embeddings(input_ids, token_type_ids)
        x = self.encoder(x, attention_bias(attention_mask, _attention_dtype(x)))
        return x, self.pooler(x)

    def hidden_states(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None
    ) -> list[Tensor]:
        """``[embeddings, layer 1, ..., layer L]``, each ``[B, T, H]`` (feature extraction; no pooler)."""
        x = self.embeddings(input_ids, token_type_ids)
        return self.encoder.all_states(x, attention_bias(attention_mask, _attention_dtype(x)))


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Transform + vocabulary projection; the projection weight is the (tied) word embedding matrix."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor, decoder_weight: Tensor) -> Tensor:
        # x: [..., H], decoder_weight: [V, H] -> [..., V]
        return F.linear(self.transform(x), decoder_weight, self.bias)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def gather_positions(sequence_output: Tensor, positions: Tensor) -> Tensor:
    """[B, T, H] at [B, P] positions -> [B, P, H]."""
    index = positions.unsqueeze(-1).expand(-1, -1, sequence_output.shape[-1])
    return sequence_output.gather(1, index)


class BertForPreTraining(nn.Module):
    """``BertModel`` + MLM and NSP heads; ``forward(batch)`` returns losses, logits and accuracy counts."""

    def __init__(self, config: BertConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config

        def build() -> None:
            self.bert = BertModel(config, seed=seed)
            self.cls = BertPreTrainingHeads(config)

        construct_then_init(self, build, lambda: self.reset_parameters(seed))

    def reset_parameters(self, seed: int = 0) -> None:
        """The same weights as a fresh ``BertForPreTraining(config, seed=seed)``."""
        self.bert.reset_parameters(seed)
        seeded_init(self.cls, self.config.initializer_range, seed, "cls")

    def logits(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        masked_lm_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``(mlm_logits, nsp_logits)``: MLM logits ``[B, P, V]`` at ``masked_lm_positions`` or, when it is
        None, ``[B, T, V]`` at every position (what HF computes); NSP logits ``[B, 2]``."""
        seq, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if masked_lm_positions is not None:
            seq = gather_positions(seq, masked_lm_positions)  # before the head: P << T
        mlm = self.cls.predictions(seq, self.bert.embeddings.word_embeddings.weight)
        return mlm, self.cls.seq_relationship(pooled)

    def forward(self, batch: Mapping[str, Tensor], *, nsp: bool = True) -> dict[str, Tensor]:
        """Pretraining loss sums and counts for a dynamically padded batch (see ``BATCH_KEYS``).

        Returns ``mlm_sum`` (cross-entropy summed over masked positions, weighted by ``masked_lm_weights``),
        ``nsp_sum`` (summed over the batch), ``mlm_logits`` ``[B, P, V]`` including padded prediction slots
        (weight 0: ignore them), ``nsp_logits`` ``[B, 2]``, and detached float counts ``mlm_correct``,
        ``mlm_count``, ``nsp_correct``, ``nsp_count``. Sums, not means: the caller divides once, by the counts
        of the whole step (over micro-batches and ranks) or of a logging interval; :func:`mean_losses` gives
        this batch's means. Nothing here synchronises with the device.
        ``nsp=False`` (MLM only): the NSP labels are ignored; ``nsp_sum`` and the NSP counts are 0.
        """
        missing = [k for k in BATCH_KEYS if k not in batch]
        if missing:
            raise KeyError(f"pretraining batch lacks key(s) {missing}")
        mlm_logits, nsp_logits = self.logits(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_lm_positions"]
        )
        ids = batch["masked_lm_ids"]  # [B, P]
        weights = batch["masked_lm_weights"].float()  # [B, P]
        labels = batch["next_sentence_labels"] if nsp else None  # [B]; --no-nsp: no NSP loss, counts 0
        vocab = mlm_logits.shape[-1]
        per_token = F.cross_entropy(mlm_logits.reshape(-1, vocab).float(), ids.reshape(-1), reduction="none")
        weights_flat = weights.reshape(-1)
        mlm_count = weights_flat.sum()
        mlm_sum = (per_token * weights_flat).sum()
        zero = mlm_sum.new_zeros(()).detach()
        nsp_sum = F.cross_entropy(nsp_logits.float(), labels, reduction="sum") if labels is not None else zero
        with torch.no_grad():
            mlm_correct = ((mlm_logits.argmax(-1) == ids).float() * weights).sum()
            nsp_correct = (nsp_logits.argmax(-1) == labels).float().sum() if labels is not None else zero
            nsp_count = zero if labels is None else torch.full((), float(labels.numel()), device=labels.device)
        return {
            "mlm_sum": mlm_sum,
            "nsp_sum": nsp_sum,
            "mlm_logits": mlm_logits,
            "nsp_logits": nsp_logits,
            "mlm_correct": mlm_correct,
            "mlm_count": mlm_count.detach(),
            "nsp_correct": nsp_correct,
            "nsp_count": nsp_count,
        }


def mean_losses(out: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``loss`` (= ``mlm_loss + nsp_loss``), ``mlm_loss`` (per masked token) and ``nsp_loss`` (per sequence)
    of one :meth:`BertForPreTraining.forward` output. Counts are whole tokens and sequences, so a count
    below 1 is 0: a batch without targets gives loss 0, not NaN."""
    mlm = out["mlm_sum"] / out["mlm_count"].clamp(min=1)
    nsp = out["nsp_sum"] / out["nsp_count"].clamp(min=1)
    return {"loss": mlm + nsp, "mlm_loss": mlm, "nsp_loss": nsp}


def num_parameters(model: nn.Module) -> int:
    """Distinct parameters (the tied decoder is the word embedding, counted once)."""
    return sum(p.numel() for p in model.parameters())
