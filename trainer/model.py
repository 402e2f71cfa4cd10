"""BERT (Devlin et al., 2018) for pretraining: the trunk (embeddings, encoder, pooler), the MLM and NSP heads, and
their initialisation. The embeddings and the vocabulary padding are :mod:`bertstream.trainer.embeddings`, the
encoder's layers :mod:`bertstream.trainer.encoder`; this module is the model's public face (``__all__``).

Parameter names and shapes are Hugging Face ``transformers.BertForPreTraining``'s, one to one: our
``named_parameters()`` equal HF's (which lists tied parameters once). The MLM decoder weight is the word
embedding matrix itself and its bias is ``cls.predictions.bias``, so the state dict has no
``cls.predictions.decoder.*`` entries (HF's are aliases of those two tensors).

MLM logits are computed only at ``masked_lm_positions``: hidden states are gathered there before the
transform and the vocabulary projection, which is what makes a step cheaper than HF's (which projects every
position onto the vocabulary).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertstream.trainer.embeddings import BertEmbeddings, pad_vocab, save_real_rows
from bertstream.trainer.encoder import BertEncoder
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.unpad import Unpadded, attention_bias, attention_dtype
from bertstream.trainer.weights_init import construct_then_init, derive_seed

__all__ = [
    "BATCH_KEYS",
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "BertForPreTraining",
    "BertModel",
    "BertPreTrainingHeads",
    "attention_bias",
    "gather_positions",
    "init_bert_weights",
    "num_parameters",
    "seeded_init",
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
            rows = getattr(m, "real_rows", m.num_embeddings)  # padded rows (see pad_vocab) stay zero
            _normal_(m.weight[:rows], std, generator)
            m.weight[rows:].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, BertLMPredictionHead):
            nn.init.zeros_(m.bias)
    # after the loop: modules() visits BertEmbeddings before its word_embeddings child
    for m in module.modules():
        if isinstance(m, BertEmbeddings):
            m.word_embeddings.weight[m.pad_token_id].zero_()


def seeded_init(module: nn.Module, std: float, seed: int, stream: str) -> None:
    """BERT-initialise ``module`` from the stream ``stream`` of ``seed``; no global RNG state is touched."""
    param = next(module.parameters(), None)
    if param is None or param.is_meta:
        return  # meta tensors are shape-only: nothing to draw
    generator = torch.Generator()  # CPU: see _normal_
    generator.manual_seed(derive_seed(seed, stream))
    init_bert_weights(module, std, generator)


# ----------------------------------------------------------------------------------------------- model


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output: Tensor) -> Tensor:
        return torch.tanh(self.dense(sequence_output[:, 0]))  # [B, T, H] -> [B, H]


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
        # One stream per part, so a fresh pooler or head can be redrawn alone (see trainer.hf.convert).
        for name, child in self.named_children():
            seeded_init(child, self.config.initializer_range, seed, f"bert.{name}")

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Returns ``(sequence_output [B, T, H], pooled_output [B, H])``."""
        x = self.embeddings(input_ids, token_type_ids)
        x = self.encoder(x, attention_bias(attention_mask, attention_dtype(x)))
        return x, self.pooler(x)

    def unpadded(self, batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor, Unpadded]:
        """``(rows [Nq, H], pooled_output [B, H], layout)``: the encoder over real tokens only (see
        ``trainer.unpad``); ``batch`` has ``input_ids``, ``token_type_ids``, ``attention_mask`` and, from the
        loader, the layout's index tensors (else they are computed here)."""
        ids, types = batch["input_ids"], batch["token_type_ids"]  # [B, T]
        layout = Unpadded.of(batch, ids.device)
        x = self.embeddings.rows(layout.gather(ids), layout.index % ids.shape[1], layout.gather(types))
        layout.bias = attention_bias(batch["attention_mask"], attention_dtype(x))
        x = self.encoder(x, layout)
        return x, torch.tanh(self.pooler.dense(x[layout.first_rows()])), layout

    def hidden_states(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None
    ) -> list[Tensor]:
        """``[embeddings, layer 1, ..., layer L]``, each ``[B, T, H]`` (feature extraction; no pooler)."""
        x = self.embeddings(input_ids, token_type_ids)
        return self.encoder.all_states(x, attention_bias(attention_mask, attention_dtype(x)))


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
        self.vocab_size = config.vocab_size
        self.bias = nn.Parameter(torch.zeros(pad_vocab(config.vocab_size)))
        save_real_rows(self, "bias", config.vocab_size)

    def forward(self, x: Tensor, decoder_weight: Tensor) -> Tensor:
        # x: [..., H], decoder_weight: [Vp, H] (padded, see pad_vocab) -> [..., V]: padded logits never win
        # nor enter the loss
        return F.linear(self.transform(x), decoder_weight, self.bias)[..., : self.vocab_size]


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
    """``BertModel`` + MLM and NSP heads; ``forward(batch)`` returns losses, logits and accuracy counts.

    ``unpad`` (the default): ``forward`` runs the encoder on real tokens only (``trainer.unpad``); the same
    losses as the padded path within float rounding. ``logits`` is always the padded path (HF's shapes)."""

    def __init__(self, config: BertConfig, *, seed: int = 0, unpad: bool = True) -> None:
        super().__init__()
        self.config = config
        self.unpad = unpad

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
        ``tokens`` and ``slots``: real tokens and the positions the encoder computed (padding included), 0-dim.
        ``nsp=False`` (MLM only): the NSP labels are ignored; ``nsp_sum`` and the NSP counts are 0.
        """
        missing = [k for k in BATCH_KEYS if k not in batch]
        if missing:
            raise KeyError(f"pretraining batch lacks key(s) {missing}")
        positions, mask = batch["masked_lm_positions"], batch["attention_mask"]  # [B, P], [B, T]
        if self.unpad:
            rows, pooled, layout = self.bert.unpadded(batch)
            seq = rows[layout.rows_at(positions)]  # [B, P, H]
            tokens, slots = layout.cu_seqlens[-2], layout.index.numel()
        else:
            seq, pooled = self.bert(batch["input_ids"], batch["token_type_ids"], mask)
            seq = gather_positions(seq, positions)
            tokens, slots = mask.sum(), mask.numel()
        mlm_logits = self.cls.predictions(seq, self.bert.embeddings.word_embeddings.weight)
        nsp_logits = self.cls.seq_relationship(pooled)
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
            "tokens": tokens.detach().float(),  # real tokens the encoder computed
            "slots": torch.full((), float(slots), device=mlm_sum.device),  # positions it computed, padding included
        }


def mean_losses(out: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``loss`` (= ``mlm_loss + nsp_loss``), ``mlm_loss`` (per masked token) and ``nsp_loss`` (per sequence)
    of one :meth:`BertForPreTraining.forward` output. Counts are whole tokens and sequences, so a count
    below 1 is 0: a batch without targets gives loss 0, not NaN."""
    mlm = out["mlm_sum"] / out["mlm_count"].clamp(min=1)
    nsp = out["nsp_sum"] / out["nsp_count"].clamp(min=1)
    return {"loss": mlm + nsp, "mlm_loss": mlm, "nsp_loss": nsp}


def num_parameters(model: nn.Module) -> int:
    """Distinct parameters (the tied decoder is the word embedding, counted once), at the real vocabulary size
    (the padded rows, see :func:`pad_vocab`, are none of the model's)."""
    padding = 0
    for m in model.modules():
        rows = getattr(m, "real_rows", None)
        if isinstance(m, nn.Embedding) and isinstance(rows, int):
            padding += (m.num_embeddings - rows) * m.embedding_dim
        elif isinstance(m, BertLMPredictionHead):
            padding += m.bias.numel() - m.vocab_size
    return sum(p.numel() for p in model.parameters()) - padding
