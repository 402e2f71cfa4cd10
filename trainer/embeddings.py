"""BERT's embeddings (word, position unless the model is RoPE's, token type; LayerNorm and dropout), and the
vocabulary padding they share with the MLM head: the word matrix (also the tied MLM decoder) and the MLM bias are
allocated at a multiple of :data:`VOCAB_MULTIPLE` rows and saved, loaded and counted at the real vocabulary size."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertstream.trainer.model_config import BertConfig

VOCAB_MULTIPLE = 64


def pad_vocab(vocab_size: int) -> int:
    """The rows the model allocates for ``vocab_size`` tokens: a multiple of :data:`VOCAB_MULTIPLE`, so that the
    MLM decoder's GEMM (and the embedding's gradient) run on aligned shapes (30,522 -> 30,528, as NVIDIA's and
    MosaicBERT's scripts pad). The padded rows are zero, never looked up (ids < vocab_size), their logits
    sliced off before the loss; ``state_dict`` and ``load_state_dict`` see the real size only, so checkpoints,
    exports and Hugging Face weights keep it."""
    return -(-vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def save_real_rows(module: nn.Module, key: str, rows: int) -> None:
    """``module``'s parameter ``key`` (padded to more than ``rows`` rows) saved and loaded at ``rows`` rows."""

    def save(mod: nn.Module, state: dict, prefix: str, local_metadata: object) -> None:
        if prefix + key in state:
            state[prefix + key] = state[prefix + key][:rows]

    def load(mod: nn.Module, state: dict, prefix: str, *args: object) -> None:
        value = state.get(prefix + key)
        current = mod.get_parameter(key)
        if isinstance(value, Tensor) and value.dim() >= 1 and value.shape[0] == rows < current.shape[0]:
            padding = value.new_zeros((current.shape[0] - rows, *value.shape[1:]))
            state[prefix + key] = torch.cat((value, padding))

    module.register_state_dict_post_hook(save)
    module.register_load_state_dict_pre_hook(load)
    # the optimizer's state too (optim.table.keep_real_rows reads this; a module attribute survives to_empty)
    setattr(module, "padded_parameters", {**getattr(module, "padded_parameters", {}), key: rows})  # noqa: B010


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(pad_vocab(config.vocab_size), config.hidden_size)
        self.word_embeddings.real_rows = config.vocab_size  # type: ignore[assignment]  # read by init_bert_weights
        save_real_rows(self, "word_embeddings.weight", config.vocab_size)
        # RoPE (config.rope): positions turn queries and keys in attention (trainer.encoder), no matrix here
        self.max_positions = config.max_position_embeddings
        self.position_embeddings = (
            None if config.rope else nn.Embedding(config.max_position_embeddings, config.hidden_size)
        )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.pad_token_id = config.pad_token_id

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        # input_ids, token_type_ids: [B, T] -> [B, T, H]
        t = input_ids.shape[1]
        if t > self.max_positions:
            raise ValueError(f"sequence length {t} exceeds max_position_embeddings={self.max_positions}")
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings.weight[:t]  # [B,T,H] + [T,H]
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))

    def rows(self, input_ids: Tensor, positions: Tensor, token_type_ids: Tensor) -> Tensor:
        # [N] each -> [N, H]: the unpadded layout's tokens, summed in forward's order
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x + self.token_type_embeddings(token_type_ids)))
