"""Our ``BertConfig`` and Hugging Face's ``config.json``, both ways (``bertstream.trainer.hf.convert`` reads and writes the
folders; the mapping is here, with the error both raise for a model that is no BERT of ours). Post-LN models are
``model_type "bert"``; pre-LN ones ``"roberta-prelayernorm"`` (``bertstream.trainer.hf.prelayernorm``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertstream.schemas import json_text
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.trainer.errors import UserError
from bertstream.trainer.hf import prelayernorm as PRE
from bertstream.trainer.model_config import BertConfig

__all__ = ["CONFIG_FILENAME", "HFCheckpointError", "config_from_hf", "hf_config_dict", "read_config"]

CONFIG_FILENAME = "config.json"


class HFCheckpointError(UserError, ValueError):
    """A Hugging Face checkpoint folder is missing, not BERT, or does not fit our model."""


def read_config(path: Path, error: type[Exception] = HFCheckpointError) -> dict[str, Any]:
    """A ``config.json`` (ours or Hugging Face's) as a dict; malformed or not an object: ``error`` naming the
    file, in one line. Every reader of a checkpoint's config.json goes through here."""
    try:
        data = json_text.loads(read_whole(path, "config"))
    except WholeFileError as e:  # a FIFO, a device, a file past the cap
        raise error(str(e)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: malformed JSON ({e})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: not a JSON object")
    return data


_HF_DEFAULTS: dict[str, Any] = {  # transformers.BertConfig defaults, for configs that omit a field
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
}
_OURS_FROM_HF = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
}


def hf_config_dict(config: BertConfig, *, architecture: str = "BertForPreTraining", dtype: str = "float32") -> dict:
    """A ``config.json`` that ``transformers.BertConfig`` reads as this architecture (a pre-LN model:
    ``RobertaPreLayerNormConfig``, as ``RobertaPreLayerNormForMaskedLM``)."""
    pre = config.pre_ln
    out: dict[str, Any] = {"architectures": [architecture], "model_type": "bert"}
    if pre:
        out = {"architectures": [PRE.ARCHITECTURE], "model_type": PRE.MODEL_TYPE}
    for ours, theirs in _OURS_FROM_HF.items():
        out[theirs] = getattr(config, ours)
    if pre:  # RoBERTa numbers positions from pad_token_id + 1
        out["max_position_embeddings"] = config.max_position_embeddings + PRE.offset(config)
    out.update(
        hidden_act="gelu",  # exact erf GELU, as our model computes
        position_embedding_type="absolute",
        is_decoder=False,
        add_cross_attention=False,
        tie_word_embeddings=True,
        use_cache=False,
        classifier_dropout=None,
        dtype=dtype,
        torch_dtype=dtype,  # transformers 4.x reads this name
    )
    return out


def config_from_hf(data: Mapping[str, Any], source: str = CONFIG_FILENAME) -> BertConfig:
    """Our ``BertConfig`` from an HF ``config.json`` dict; raises ``HFCheckpointError`` for non-BERT models."""
    model_type = data.get("model_type")
    # Google's original bert_config.json has no model_type; anything that names another type is refused.
    if model_type is not None and model_type not in ("bert", PRE.MODEL_TYPE):
        raise HFCheckpointError(f"{source}: model_type is {model_type!r}, not 'bert' (nor {PRE.MODEL_TYPE!r})")
    pre = model_type == PRE.MODEL_TYPE
    defaults = {**_HF_DEFAULTS, "pad_token_id": 1} if pre else _HF_DEFAULTS  # RobertaPreLayerNormConfig's pad id
    merged = {**defaults, **{k: v for k, v in data.items() if v is not None}}
    if merged["hidden_act"] not in ("gelu", "gelu_python"):
        raise HFCheckpointError(
            f"{source}: hidden_act={merged['hidden_act']!r} is not supported (this model uses exact 'gelu')"
        )
    position = merged.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise HFCheckpointError(f"{source}: position_embedding_type={position!r} is not supported (only 'absolute')")
    for flag in ("is_decoder", "add_cross_attention"):
        if merged.get(flag):
            raise HFCheckpointError(f"{source}: {flag}=true is not supported (encoder-only BERT)")
    fields = {ours: merged[theirs] for ours, theirs in _OURS_FROM_HF.items()}
    if pre:
        fields["norm_placement"] = "pre"
        for name in ("max_position_embeddings", "pad_token_id"):  # (they are subtracted before BertConfig checks)
            value = merged[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise HFCheckpointError(f"{source}: {name} must be an integer, got {value!r}")
        fields["max_position_embeddings"] = merged["max_position_embeddings"] - (merged["pad_token_id"] + 1)
    try:
        return BertConfig(**fields)
    except (TypeError, ValueError) as e:
        raise HFCheckpointError(f"{source}: {e}") from None
