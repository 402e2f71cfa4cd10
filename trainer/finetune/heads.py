"""Task heads on the shared encoder (``bertstream.trainer.model.BertModel`` as ``.bert``), named as Hugging Face's
``BertForSequenceClassification`` (``bert.*``, ``classifier.*``), ``BertForTokenClassification``
(``bert.*``, ``classifier.*``) and ``BertForQuestionAnswering`` (``bert.*``, ``qa_outputs.*``).

HF builds the token-classification and QA models without a pooler; ours keeps ``bert.pooler`` (one encoder
class for every task) but freezes it there, so it gets no gradient and DDP sees no unused trainable parameter.
Heads are initialised as BERT's (N(0, initializer_range), zero bias) from their own seed stream.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertstream.schemas import tasks as T
from bertstream.trainer.model import BertModel, seeded_init
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.pooling import SENTENCE_HEAD, mean_pool
from bertstream.trainer.weights import InitError, TaskHead
from bertstream.trainer.weights_init import construct_then_init

__all__ = [
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "load_encoder_state",
    "reuse_head",
]


class _EncoderClassifier(nn.Module):
    """The encoder (``bert``), dropout and a linear ``classifier``: what the sequence and token heads share."""

    def __init__(self, config: BertConfig, num_labels: int, seed: int) -> None:
        super().__init__()
        self.config, self.num_labels = config, num_labels

        def build() -> None:
            self.bert = BertModel(config, seed=seed)
            self.dropout = nn.Dropout(config.hidden_dropout)
            self.classifier = nn.Linear(config.hidden_size, num_labels)

        construct_then_init(self, build, lambda: self.reset_parameters(seed))

    def reset_parameters(self, seed: int = 0) -> None:
        self.bert.reset_parameters(seed)
        seeded_init(self.classifier, self.config.initializer_range, seed, "classifier")


class BertForSequenceClassification(_EncoderClassifier):
    """pooled -> dropout -> linear. ``num_labels == 1`` is regression (MSE), else cross-entropy.

    ``pooling="cls"``: BERT's pooler (tanh of a dense layer on the [CLS] state), as Hugging Face's class.
    ``pooling="mean"``: the mean of the last layer over real tokens, the pooler frozen and unused. An encoder
    pretrained with MLM alone never trained the pooler, nor the [CLS] state of its last layer (no loss is
    computed there); the mean reads the states that MLM did train.
    """

    def __init__(self, config: BertConfig, num_labels: int, *, seed: int = 0, pooling: str = "cls") -> None:
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        if pooling not in SENTENCE_HEAD:
            raise ValueError(f"pooling must be one of {SENTENCE_HEAD}, got {pooling!r}")
        super().__init__(config, num_labels, seed)
        self.pooling = pooling
        if pooling == "mean":
            self.bert.pooler.requires_grad_(False)  # no gradient: DDP must not wait for it

    def forward(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        seq, pooled = self.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        if self.pooling == "mean":
            pooled = mean_pool(seq, batch["attention_mask"])
        logits = self.classifier(self.dropout(pooled)).float()  # [B, C]
        out = {"logits": logits.squeeze(-1) if self.num_labels == 1 else logits}  # regression: [B]
        if "labels" in batch:
            labels = batch["labels"]
            out["loss"] = (
                F.mse_loss(out["logits"], labels.float()) if self.num_labels == 1 else F.cross_entropy(logits, labels)
            )
        return out


class BertForTokenClassification(_EncoderClassifier):
    """Sequence output -> dropout -> linear; cross-entropy over tokens whose label is not -100."""

    def __init__(self, config: BertConfig, num_labels: int, *, seed: int = 0) -> None:
        if num_labels < 2:
            raise ValueError(f"token classification needs >= 2 labels, got {num_labels}")
        super().__init__(config, num_labels, seed)
        self.bert.pooler.requires_grad_(False)

    def forward(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        seq, _ = self.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        logits = self.classifier(self.dropout(seq)).float()  # [B, T, C]
        out = {"logits": logits}
        if "labels" in batch:
            out["loss"] = F.cross_entropy(
                logits.reshape(-1, self.num_labels), batch["labels"].reshape(-1), ignore_index=T.IGNORE_INDEX
            )
        return out


class BertForQuestionAnswering(nn.Module):
    """Sequence output -> linear(2): start and end logits; loss = (CE(start) + CE(end)) / 2."""

    def __init__(self, config: BertConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config

        def build() -> None:
            self.bert = BertModel(config, seed=seed)
            self.qa_outputs = nn.Linear(config.hidden_size, 2)

        construct_then_init(self, build, lambda: self.reset_parameters(seed))
        self.bert.pooler.requires_grad_(False)

    def reset_parameters(self, seed: int = 0) -> None:
        self.bert.reset_parameters(seed)
        seeded_init(self.qa_outputs, self.config.initializer_range, seed, "qa_outputs")

    def forward(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        seq, _ = self.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        start, end = self.qa_outputs(seq).float().unbind(-1)  # [B, T] each
        out = {"start_logits": start, "end_logits": end}
        if "start_positions" in batch:
            out["loss"] = (
                F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])
            ) / 2
        return out


def load_encoder_state(model: nn.Module, state: Mapping[str, Tensor], source: str) -> None:
    """Copy the ``bert.*`` tensors of ``state`` into ``model.bert``; every encoder weight must be there, each of
    the model's shape (else an ``InitError`` naming ``source``, the flag and its folder: a checkpoint that lacked one
    was a ``ValueError`` traceback in ``finetune``)."""
    encoder = {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}
    bert = model.bert
    assert isinstance(bert, nn.Module)
    expected = bert.state_dict()
    missing = sorted(set(expected) - set(encoder))
    if missing:
        raise InitError(
            f"{source}: the initial weights lack encoder tensor(s) {['bert.' + k for k in missing[:8]]}"
            + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        )
    for k, v in encoder.items():
        if k in expected and v.shape != expected[k].shape:
            raise InitError(
                f"{source}: bert.{k} has shape {tuple(v.shape)}, the model expects {tuple(expected[k].shape)}"
            )
    with torch.no_grad():
        bert.load_state_dict({k: encoder[k] for k in expected}, strict=True)


def reuse_head(
    model: nn.Module, head: TaskHead | None, wanted: tuple[str, tuple[str, ...], str], *, pooled: bool
) -> str | None:
    """Copy the initial weights' task head into ``model`` when it was trained for this run's task: the same kind,
    labels (names and order) and pooling (``wanted``: ``(kind, labels, pooling)``; pooling counts only where the
    task's head reads the pooled state, ``pooled``: its ``Task.hf.pooled``); else leave the fresh head. The
    one-line note says which (None: the weights hold no task head)."""
    if head is None:
        return None
    same = lambda h: h if pooled else (*h[:2], "cls")  # noqa: E731
    names = {k: v for k, v in model.state_dict().items() if not k.startswith("bert.")}  # the head's tensors
    fits = all(k in head.tensors and head.tensors[k].shape == v.shape for k, v in names.items())
    if same(head.trained_for) != same(wanted) or not fits:
        return (
            f"task head initialised fresh: the initial weights' head is for {head.kind} with labels "
            f"{list(head.labels)}, pooling {head.pooling}; this run is {wanted[0]} with labels {list(wanted[1])}, "
            f"pooling {wanted[2]}"
        )
    with torch.no_grad():
        for key, value in names.items():
            value.copy_(head.tensors[key])
    return f"task head reused from the initial weights ({wanted[0]}, {len(wanted[1]) or 'no'} labels): training continues it"
