"""Pre-LN models in Hugging Face's format: ``transformers``' RoBERTa-PreLayerNorm (``model_type
"roberta-prelayernorm"``) holds our pre-LN BERT exactly, so ``AutoModel``, ``AutoModelForMaskedLM`` and the
``fill-mask`` pipeline load an exported folder as it is.

The two architectures compute the same function: LayerNorm after the embedding sum; in each block
``x + Attn(LN(x))`` then ``x + FFN(LN(x))``; one LayerNorm after the last block; the same MLM head (dense, exact
GELU, LayerNorm, decoder tied to the word embeddings). They differ in names (ours keep BERT's: the LayerNorm
before a sublayer is stored with that sublayer's output, RoBERTa's with its input) and in positions: RoBERTa
numbers a token's position from ``pad_token_id + 1`` (padding itself gets ``pad_token_id``), so our row ``p``
of the position table is RoBERTa's row ``p + pad_token_id + 1`` and its table is that much longer. Inputs with
padding only at the end (what tokenizers and our collate make) then get the same positions in both. RoBERTa has
no next-sentence head: NSP weights are not exported, and are drawn fresh when such a folder is read back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor

from bertstream.trainer.model_config import BertConfig

MODEL_TYPE = "roberta-prelayernorm"
ARCHITECTURE = "RobertaPreLayerNormForMaskedLM"
PREFIX = "roberta_prelayernorm."
POSITIONS = "bert.embeddings.position_embeddings.weight"

# (our name pattern, RoBERTa-PreLayerNorm's), per parameter; {} is a layer index, the suffix .weight/.bias follows
_RENAMES = (
    ("bert.embeddings.", PREFIX + "embeddings."),
    ("bert.encoder.layer.{}.attention.self.", PREFIX + "encoder.layer.{}.attention.self."),
    ("bert.encoder.layer.{}.attention.output.dense.", PREFIX + "encoder.layer.{}.attention.output.dense."),
    ("bert.encoder.layer.{}.attention.output.LayerNorm.", PREFIX + "encoder.layer.{}.attention.LayerNorm."),
    ("bert.encoder.layer.{}.intermediate.dense.", PREFIX + "encoder.layer.{}.intermediate.dense."),
    ("bert.encoder.layer.{}.output.LayerNorm.", PREFIX + "encoder.layer.{}.intermediate.LayerNorm."),
    ("bert.encoder.layer.{}.output.dense.", PREFIX + "encoder.layer.{}.output.dense."),
    ("bert.encoder.final_layer_norm.", PREFIX + "LayerNorm."),
    ("bert.pooler.", PREFIX + "pooler."),
    ("cls.predictions.transform.dense.", "lm_head.dense."),
    ("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
    ("cls.predictions.bias", "lm_head.bias"),
)
_NOT_EXPORTED = ("cls.seq_relationship.",)  # RoBERTa has no NSP head
# Tied aliases transformers saves or expects but recomputes: the decoder is the word embeddings and lm_head.bias.
TIED = ("lm_head.decoder.weight", "lm_head.decoder.bias")
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(re.escape(pattern).replace(r"\{\}", r"(\d+)"))


_FORWARD = [(_compiled(a), b) for a, b in _RENAMES]
_BACKWARD = [(_compiled(b), a) for a, b in _RENAMES]


def _rename(key: str, rules: list[tuple[re.Pattern[str], str]]) -> str | None:
    for pattern, target in rules:
        m = pattern.match(key)
        if m:
            return (target.replace("{}", m.group(1)) if m.groups() else target) + key[m.end() :]
    return None


def offset(config: BertConfig) -> int:
    """Rows RoBERTa's position table has before our position 0."""
    return config.pad_token_id + 1


def to_roberta(state: Mapping[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """Our ``BertForPreTraining`` state -> ``RobertaPreLayerNormForMaskedLM``'s (plus its base model's pooler)."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key.startswith(_NOT_EXPORTED):
            continue
        name = _rename(key, _FORWARD)
        if name is None:
            raise ValueError(f"{key}: no RoBERTa-PreLayerNorm counterpart")
        if key == POSITIONS:  # [P, H] -> [P + offset, H]; the rows before position 0 are RoBERTa's padding rows
            value = torch.cat((torch.zeros(offset(config), value.shape[1], dtype=value.dtype), value))
        out[name] = value
    return out


def from_roberta(hf_state: Mapping[str, Tensor], config: BertConfig) -> tuple[dict[str, Tensor], list[str]]:
    """A RoBERTa-PreLayerNorm state (any head, with or without its ``roberta_prelayernorm.`` prefix) -> our names
    for the tensors that have ours, and the keys that have none (tied aliases, buffers, other heads)."""
    ours: dict[str, Tensor] = {}
    other: list[str] = []
    for raw, value in hf_state.items():
        key = raw if raw.startswith((PREFIX, "lm_head.")) else PREFIX + raw
        if raw in TIED or key.removeprefix(PREFIX) in _BUFFERS:
            other.append(raw)
            continue
        name = _rename(key, _BACKWARD)
        if name is None:
            other.append(raw)
            continue
        if name == POSITIONS:
            value = value[offset(config) : offset(config) + config.max_position_embeddings]
        ours[name] = value
    return ours, other
