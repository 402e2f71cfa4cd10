"""Fine-tuned models in Hugging Face's format: each task kind's weights under the names of its ``transformers``
Auto class, so ``pipeline("text-classification" | "token-classification" | "question-answering")`` serves them.

A kind says which class holds it in its ``HFHead`` (the ``hf`` of its fine-tuning ``Task``,
``bertstream.trainer.finetune.tasks``); nothing here knows the kinds. Today's:

=============================  ========================================  ===========================================
task kind                      post-LN (``model_type "bert"``)           pre-LN (``"roberta-prelayernorm"``)
=============================  ========================================  ===========================================
classification, regression     ``BertForSequenceClassification``         ``RobertaPreLayerNormForSequenceClassification``
ner                            ``BertForTokenClassification``            ``RobertaPreLayerNormForTokenClassification``
squad                          ``BertForQuestionAnswering``              ``RobertaPreLayerNormForQuestionAnswering``
=============================  ========================================  ===========================================

Our heads (``bertstream.trainer.finetune.heads``) already carry HF BERT's names, so post-LN is the identity but
for the pooler, which HF's token and QA models do not have (ours is frozen and unused there). RoBERTa's sentence
head is ``dense -> tanh -> out_proj`` on the [CLS] state: exactly our pooler (dense, tanh) then ``classifier``, so
the pooler becomes ``classifier.dense`` and our classifier ``classifier.out_proj`` (dropout aside: eval computes
the same logits). A ``--pooling mean`` head has no counterpart in either library: its export is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bertstream.trainer.hf import prelayernorm as PRE
from bertstream.trainer.hf.config import HFCheckpointError, hf_config_dict
from bertstream.trainer.model_config import BertConfig

__all__ = [
    "CLASSES",
    "HFHead",
    "NO_LABELS",
    "VALUE",
    "architecture",
    "find_head",
    "task_class",
    "TaskHead",
    "head_shapes",
    "pooler_back",
    "read_head",
    "task_config_dict",
    "task_state_dict",
]

# What a head's config.json ``id2label`` names: the data's labels (one output each), one value, or nothing.
CLASSES, VALUE, NO_LABELS = "classes", "value", "none"
# The one HF class whose RoBERTa head holds our pooler (``classifier.dense``) before its ``classifier.out_proj``.
_ROBERTA_SENTENCE = "ForSequenceClassification"
_POOLER = "bert.pooler."


@dataclass(frozen=True, slots=True)
class HFHead:
    """The ``transformers`` class a task kind's model is exported as, and how its head maps there."""

    kind: str  # the task kind (config.json's task.kind of a fine-tuning run)
    suffix: str  # the class after the model's name: Bert<suffix>, RobertaPreLayerNorm<suffix>
    prefix: str  # our head's parameters (HF BERT's names too): "classifier." or "qa_outputs."
    pooled: bool  # the head reads the pooler (a sentence head): HF's class keeps it, and --pooling counts
    labels: str  # CLASSES, VALUE or NO_LABELS: what id2label names
    outputs: int = 0  # the head's outputs; 0: one per label
    problem_type: str | None = None  # written to config.json
    reads: tuple[str | None, ...] | None = None  # the problem types of a folder holding this head (None: any)

    def __post_init__(self) -> None:
        if self.labels not in (CLASSES, VALUE, NO_LABELS):
            raise ValueError(f"labels must be {CLASSES}, {VALUE} or {NO_LABELS}, got {self.labels!r}")

    def holds(self, architecture: str, problem_type: object) -> bool:
        """Whether an HF folder of this class (``architectures[0]``) and problem type holds this kind's head."""
        return architecture.endswith(self.suffix) and (self.reads is None or problem_type in self.reads)


def find_head(heads: Sequence[HFHead], kind: str) -> HFHead:
    """The head of ``kind`` among the kinds' ``heads``."""
    for head in heads:
        if head.kind == kind:
            return head
    raise HFCheckpointError(f"task kind {kind!r} has no Hugging Face class (kinds: {', '.join(h.kind for h in heads)})")


def architecture(head: HFHead, config: BertConfig) -> str:
    """The ``transformers`` class that holds a fine-tuned model of this head and norm placement."""
    return ("RobertaPreLayerNorm" if config.pre_ln else "Bert") + head.suffix


def head_shapes(head: HFHead, config: BertConfig, labels: Sequence[str]) -> dict[str, torch.Size]:
    """Our head's parameters for this label list (the encoder's are ``BertModel``'s)."""
    outputs = head.outputs or len(labels)
    return {
        head.prefix + "weight": torch.Size((outputs, config.hidden_size)),
        head.prefix + "bias": torch.Size((outputs,)),
    }


def task_state_dict(state: Mapping[str, Tensor], config: BertConfig, head: HFHead) -> dict[str, Tensor]:
    """Our task model's state (``bert.*`` + head) -> the HF task class's (see the module docstring)."""
    prefix = head.prefix
    odd = sorted(k for k in state if not k.startswith(("bert.", prefix)))
    if odd:
        raise HFCheckpointError(f"{head.kind} model weights hold {odd[:4]}, which no {architecture(head, config)} has")
    keep = {k: v for k, v in state.items() if head.pooled or not k.startswith(_POOLER)}  # token/QA: no pooler in HF
    if not config.pre_ln:
        return keep
    encoder = {k: v for k, v in keep.items() if k.startswith("bert.") and not k.startswith(_POOLER)}
    out = PRE.to_roberta(encoder, config)
    if head.suffix == _ROBERTA_SENTENCE:
        out |= {
            "classifier.dense." + k.removeprefix(_POOLER + "dense."): v
            for k, v in keep.items()
            if k.startswith(_POOLER)
        }
        out |= {"classifier.out_proj." + k.removeprefix(prefix): v for k, v in keep.items() if k.startswith(prefix)}
    else:
        if head.pooled:  # a pooled head of another class: RoBERTa's model keeps its pooler
            out |= PRE.to_roberta({k: v for k, v in keep.items() if k.startswith(_POOLER)}, config)
        out |= {k: v for k, v in keep.items() if k.startswith(prefix)}
    return out


def task_config_dict(
    config: BertConfig, head: HFHead, labels: Sequence[str], *, dtype: str = "float32", names: Sequence[str] = ()
) -> dict[str, Any]:
    """``config.json`` of the exported task model: the encoder's (``hf_config_dict``), its class, and the
    label names (``id2label``/``label2id``; a value (regression): one output, ``LABEL_0``): ``names``
    (``--label-names``) where given, else the data's ``labels``; renamed, the data's labels are kept too
    (``bertstream_labels``), so ``finetune --init`` of the export knows the head's labels."""
    out = hf_config_dict(config, dtype=dtype)
    out["architectures"] = [architecture(head, config)]
    if head.labels == NO_LABELS:
        return out
    data_labels = ["LABEL_0"] if head.labels == VALUE else list(labels)
    if not data_labels:
        raise HFCheckpointError(f"a {head.kind} model needs its label list; the checkpoint's config.json has none")
    names = list(names) if names and head.labels == CLASSES else data_labels
    if len(names) != len(data_labels) or len(set(names)) != len(names):
        raise HFCheckpointError(f"label names {names} do not name the {len(data_labels)} labels {data_labels} one each")
    if names != data_labels:
        out["bertstream_labels"] = data_labels
    out["id2label"] = {str(i): name for i, name in enumerate(names)}
    out["label2id"] = {name: i for i, name in enumerate(names)}
    if head.problem_type is not None:
        out["problem_type"] = head.problem_type
    return out


def run_labels(task: Mapping[str, Any], where: object) -> tuple[list[str], list[str]]:
    """(the data's labels, their names for the export: ``--label-names``, empty before it) of a fine-tuning run's
    ``config.json`` ``task`` section, checked: the file is untrusted."""
    labels, names = task.get("labels") or [], task.get("label_names") or []
    for key, value in (("labels", labels), ("label_names", names)):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise HFCheckpointError(f"{where}: task.{key} is no list of label names")
    return labels, names


def task_class(architectures: Sequence[str], heads: Sequence[HFHead], problem_type: object) -> HFHead | None:
    """The kind's head that a folder of these ``architectures`` holds (the first that one does), among
    ``heads``; None: none does."""
    found = (h for a in architectures if isinstance(a, str) for h in heads if h.holds(a, problem_type))
    return next(found, None)


def pooler_back(hf_state: Mapping[str, Tensor], architectures: Sequence[str]) -> dict[str, Tensor]:
    """A RoBERTa-PreLayerNorm sequence classifier's ``classifier.dense`` is our pooler (dense, tanh on [CLS]):
    read back as the encoder's pooler, not drawn fresh."""
    if not any(a.endswith(_ROBERTA_SENTENCE) for a in architectures):
        return dict(hf_state)
    dense = "classifier.dense."
    return {
        (PRE.PREFIX + "pooler.dense." + k.removeprefix(dense) if k.startswith(dense) else k): v
        for k, v in hf_state.items()
    }


TaskHead = tuple[str, tuple[str, ...], str]  # (task kind, label names, pooling): what a head was trained for


def read_head(
    hf_state: Mapping[str, Tensor], data: Mapping[str, Any], heads: Sequence[HFHead]
) -> tuple[TaskHead, dict[str, Tensor]] | None:
    """A task class's head (``config.json``'s ``architectures``, ``problem_type``) in our names, and what it was
    trained for: the kind whose ``HFHead`` (among ``heads``) holds that class, the labels (``id2label`` by id).
    None: no kind's class, or its head tensors are absent or its label map malformed (the head then starts
    fresh)."""
    head = task_class(data.get("architectures") or (), heads, data.get("problem_type"))
    if head is None:
        return None
    pre = data.get("model_type") == PRE.MODEL_TYPE
    theirs = "classifier.out_proj." if pre and head.suffix == _ROBERTA_SENTENCE else head.prefix
    if any(theirs + p not in hf_state for p in ("weight", "bias")):
        return None
    labels: tuple[str, ...] = ()
    if head.labels == CLASSES:
        id2label = data.get("id2label")
        if not isinstance(id2label, dict):
            return None
        try:
            labels = tuple(str(id2label[k]) for k in sorted(id2label, key=int))
        except (TypeError, ValueError):
            return None
        ours_too = data.get("bertstream_labels")  # an export under --label-names: the data's labels, by id
        if isinstance(ours_too, list) and len(ours_too) == len(labels) and all(isinstance(x, str) for x in ours_too):
            labels = tuple(ours_too)
    return (head.kind, labels, "cls"), {head.prefix + p: hf_state[theirs + p] for p in ("weight", "bias")}
