"""Hugging Face interop, the tensors: our BERT's state dict and a ``transformers`` checkpoint's, both ways
(:mod:`bertstream.trainer.hf.load` reads HF folders with it, :mod:`bertstream.trainer.hf.export` writes them).

Post-LN: key mapping (ours -> HF ``BertForPreTraining``) is the identity. ``cls.predictions.decoder.{weight,bias}``
(HF's tied aliases of ``bert.embeddings.word_embeddings.weight`` and ``cls.predictions.bias``) are not
written, exactly as ``save_pretrained`` does not write them. Pre-LN: ``RobertaPreLayerNormForMaskedLM``, which
computes the same function (:mod:`bertstream.trainer.hf.prelayernorm` maps the names and positions).

This room does not import ``transformers``: it writes and reads the files themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from bertstream.trainer.hf.config import HFCheckpointError
from bertstream.trainer.model import BertForPreTraining, BertPooler, BertPreTrainingHeads, seeded_init
from bertstream.trainer.model_config import BertConfig

__all__ = ["SAFETENSORS_FILENAME", "TORCH_FILENAME", "expected_shapes", "from_hf_state_dict", "to_hf_state_dict"]

SAFETENSORS_FILENAME = "model.safetensors"
TORCH_FILENAME = "pytorch_model.bin"

# Parameters a checkpoint of an encoder-only model (BertModel, classification, QA, ...) may lack: they are
# initialised fresh and reported. Anything else missing is an error.
_HEAD_PREFIXES = ("cls.", "bert.pooler.")
# Non-parameter buffers older HF versions saved; they carry no information.
_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")


def expected_shapes(config: BertConfig) -> dict[str, torch.Size]:
    with torch.device("meta"):
        model = BertForPreTraining(config)
    return {k: v.shape for k, v in model.state_dict().items()}


def to_hf_state_dict(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Our key names -> HF ``BertForPreTraining`` key names: the same names."""
    return dict(state)


def _normalise_hf_key(key: str) -> str:
    # BertModel checkpoints have no "bert." prefix; TF-converted ones call LayerNorm parameters gamma/beta.
    if key.startswith(("embeddings.", "encoder.", "pooler.")):
        key = "bert." + key
    if key.endswith(".gamma"):
        key = key[: -len(".gamma")] + ".weight"
    elif key.endswith(".beta"):
        key = key[: -len(".beta")] + ".bias"
    return key


def from_hf_state_dict(
    hf_state: Mapping[str, Tensor],
    config: BertConfig,
    *,
    seed: int = 0,
    tie_word_embeddings: bool = True,
    source: str = "checkpoint",
) -> tuple[dict[str, Tensor], list[str], list[tuple[str, str]]]:
    """HF BERT tensors -> ``(our complete state dict, fresh keys, ignored (key, reason))``.

    Encoder weights must all be present; missing pooler/MLM/NSP weights are drawn fresh from ``seed``.
    """
    expected = expected_shapes(config)
    ours: dict[str, Tensor] = {}
    ignored: list[tuple[str, str]] = []
    normalised: dict[str, tuple[str, Tensor]] = {}
    for raw_key, value in hf_state.items():
        key = _normalise_hf_key(raw_key)
        if key in normalised:
            raise HFCheckpointError(f"{source}: keys {normalised[key][0]!r} and {raw_key!r} name the same tensor")
        normalised[key] = (raw_key, value)

    for key, (raw_key, value) in normalised.items():
        if key in expected:
            ours[key] = value
        elif key in _BUFFERS:
            ignored.append((raw_key, "buffer, recomputed"))
        elif key == "cls.predictions.decoder.weight":
            word = normalised.get("bert.embeddings.word_embeddings.weight")
            if word is not None and word[1].shape == value.shape and not torch.equal(word[1], value):
                if not tie_word_embeddings:
                    raise HFCheckpointError(
                        f"{source}: {raw_key} differs from the word embeddings and tie_word_embeddings is false; "
                        "this model always ties the MLM decoder to the word embeddings"
                    )
                reason = "tied to bert.embeddings.word_embeddings.weight (values differed; HF ties them too)"
                ignored.append((raw_key, reason))
            else:
                ignored.append((raw_key, "tied to bert.embeddings.word_embeddings.weight"))
        elif key == "cls.predictions.decoder.bias":
            if "cls.predictions.bias" in normalised:
                ignored.append((raw_key, "tied to cls.predictions.bias"))
            else:
                ours["cls.predictions.bias"] = value
        elif key.startswith("bert."):
            raise HFCheckpointError(
                f"{source}: encoder key {raw_key!r} has no counterpart in this BERT "
                f"(num_layers={config.num_layers}); the checkpoint is a different architecture"
            )
        else:
            ignored.append((raw_key, "not part of BertForPreTraining (another task's head)"))

    for key, value in ours.items():
        if value.shape != expected[key]:
            raise HFCheckpointError(
                f"{source}: {key} has shape {tuple(value.shape)}, expected {tuple(expected[key])} for this config"
            )

    missing = [k for k in expected if k not in ours]
    encoder_missing = [k for k in missing if not k.startswith(_HEAD_PREFIXES)]
    if encoder_missing:
        raise HFCheckpointError(f"{source}: lacks encoder weight(s) {encoder_missing}")
    if missing:
        # Same streams as BertForPreTraining(config, seed=seed), without building a whole model.
        with torch.device("meta"):  # skip torch's default init: it would draw from the global RNG
            fresh_parts: dict[str, nn.Module] = {"bert.pooler": BertPooler(config), "cls": BertPreTrainingHeads(config)}
        fresh_state: dict[str, Tensor] = {}
        for stream, module in fresh_parts.items():
            module.to_empty(device="cpu")
            seeded_init(module, config.initializer_range, seed, stream)
            fresh_state.update({f"{stream}.{k}": v for k, v in module.state_dict().items()})
        for k in missing:
            ours[k] = fresh_state[k]
    return {k: ours[k] for k in expected}, missing, ignored
