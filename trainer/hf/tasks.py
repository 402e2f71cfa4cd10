"""Fine-tuned models in Hugging Face's format: each task kind's weights under the names of its ``transformers``
Auto class, so ``pipeline("text-classification" | "token-classification" | "question-answering")`` serves them.

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
from typing import Any

import torch
from torch import Tensor

from bertstream.schemas import tasks as T
from bertstream.trainer.hf import prelayernorm as PRE
from bertstream.trainer.hf.config import HFCheckpointError, hf_config_dict
from bertstream.trainer.model_config import BertConfig

__all__ = [
    "architecture",
    "check_pooling",
    "TaskHead",
    "head_shapes",
    "pooler_back",
    "read_head",
    "task_config_dict",
    "task_state_dict",
]

_SUFFIX = {
    T.CLASSIFICATION: "ForSequenceClassification",
    T.REGRESSION: "ForSequenceClassification",
    T.NER: "ForTokenClassification",
    T.SQUAD: "ForQuestionAnswering",
}
_HEADS = {  # our head's parameter prefix, per kind
    T.CLASSIFICATION: "classifier.",
    T.REGRESSION: "classifier.",
    T.NER: "classifier.",
    T.SQUAD: "qa_outputs.",
}
_POOLER = "bert.pooler."


def architecture(kind: str, config: BertConfig) -> str:
    """The ``transformers`` class that holds a fine-tuned model of this kind and norm placement."""
    if kind not in _SUFFIX:
        raise HFCheckpointError(f"task kind {kind!r} has no Hugging Face class (kinds: {', '.join(T.KINDS)})")
    return ("RobertaPreLayerNorm" if config.norm_placement == "pre" else "Bert") + _SUFFIX[kind]


def head_shapes(kind: str, config: BertConfig, labels: Sequence[str]) -> dict[str, torch.Size]:
    """Our head's parameters for this kind and label list (the encoder's are ``BertModel``'s)."""
    outputs = 2 if kind == T.SQUAD else 1 if kind == T.REGRESSION else len(labels)
    architecture(kind, config)  # refuses a kind that has no class
    head = _HEADS[kind]
    return {head + "weight": torch.Size((outputs, config.hidden_size)), head + "bias": torch.Size((outputs,))}


def check_pooling(pooling: str, source: str) -> None:
    """Only [CLS] pooling has an HF counterpart; a mean-pooled head exported as one would give other logits."""
    if pooling != "cls":
        raise HFCheckpointError(
            f"{source} was fine-tuned with --pooling {pooling}: no transformers sequence classifier pools that way "
            "(they read the [CLS] state), so its logits cannot be exported; fine-tune with --pooling cls to serve it"
        )


def task_state_dict(state: Mapping[str, Tensor], config: BertConfig, kind: str) -> dict[str, Tensor]:
    """Our task model's state (``bert.*`` + head) -> the HF task class's (see the module docstring)."""
    head = _HEADS[kind]
    odd = sorted(k for k in state if not k.startswith(("bert.", head)))
    if odd:
        raise HFCheckpointError(f"{kind} model weights hold {odd[:4]}, which no {architecture(kind, config)} has")
    sentence = kind in (T.CLASSIFICATION, T.REGRESSION)
    keep = {k: v for k, v in state.items() if sentence or not k.startswith(_POOLER)}  # token/QA: no pooler in HF
    if config.norm_placement != "pre":
        return keep
    encoder = {k: v for k, v in keep.items() if k.startswith("bert.") and not k.startswith(_POOLER)}
    out = PRE.to_roberta(encoder, config)
    if sentence:
        out |= {
            "classifier.dense." + k.removeprefix(_POOLER + "dense."): v
            for k, v in keep.items()
            if k.startswith(_POOLER)
        }
        out |= {"classifier.out_proj." + k.removeprefix(head): v for k, v in keep.items() if k.startswith(head)}
    else:
        out |= {k: v for k, v in keep.items() if k.startswith(head)}
    return out


def task_config_dict(
    config: BertConfig, kind: str, labels: Sequence[str], *, dtype: str = "float32", names: Sequence[str] = ()
) -> dict[str, Any]:
    """``config.json`` of the exported task model: the encoder's (``hf_config_dict``), its class, and the
    label names (``id2label``/``label2id``; regression: one output, ``problem_type "regression"``): ``names``
    (``--label-names``) where given, else the data's ``labels``; renamed, the data's labels are kept too
    (``bertstream_labels``), so ``finetune --init`` of the export knows the head's labels."""
    out = hf_config_dict(config, dtype=dtype)
    out["architectures"] = [architecture(kind, config)]
    if kind == T.SQUAD:
        return out
    data_labels = ["LABEL_0"] if kind == T.REGRESSION else list(labels)
    if not data_labels:
        raise HFCheckpointError(f"a {kind} model needs its label list; the checkpoint's config.json has none")
    names = list(names) if names and kind != T.REGRESSION else data_labels
    if len(names) != len(data_labels) or len(set(names)) != len(names):
        raise HFCheckpointError(f"label names {names} do not name the {len(data_labels)} labels {data_labels} one each")
    if names != data_labels:
        out["bertstream_labels"] = data_labels
    out["id2label"] = {str(i): name for i, name in enumerate(names)}
    out["label2id"] = {name: i for i, name in enumerate(names)}
    if kind in (T.CLASSIFICATION, T.REGRESSION):
        out["problem_type"] = "regression" if kind == T.REGRESSION else "single_label_classification"
    return out


def run_labels(task: Mapping[str, Any], where: object) -> tuple[list[str], list[str]]:
    """(the data's labels, their names for the export: ``--label-names``, empty before it) of a fine-tuning run's
    ``config.json`` ``task`` section, checked: the file is untrusted."""
    labels, names = task.get("labels") or [], task.get("label_names") or []
    for key, value in (("labels", labels), ("label_names", names)):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise HFCheckpointError(f"{where}: task.{key} is no list of label names")
    return labels, names


def _task_heads(architectures: Sequence[str]) -> list[str]:
    return [a for a in architectures if a.endswith(tuple(set(_SUFFIX.values())))]


def pooler_back(hf_state: Mapping[str, Tensor], architectures: Sequence[str]) -> dict[str, Tensor]:
    """A RoBERTa-PreLayerNorm sequence classifier's ``classifier.dense`` is our pooler (dense, tanh on [CLS]):
    read back as the encoder's pooler, not drawn fresh."""
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        return dict(hf_state)
    dense = "classifier.dense."
    return {
        (PRE.PREFIX + "pooler.dense." + k.removeprefix(dense) if k.startswith(dense) else k): v
        for k, v in hf_state.items()
    }


TaskHead = tuple[str, tuple[str, ...], str]  # (task kind, label names, pooling): what a head was trained for


def read_head(hf_state: Mapping[str, Tensor], data: Mapping[str, Any]) -> tuple[TaskHead, dict[str, Tensor]] | None:
    """A task class's head (``config.json``'s ``architectures``) in our names, and what it was trained for:
    the kind (``problem_type "regression"``: regression), the labels (``id2label`` by id). None: no task class,
    or its head tensors are absent or its label map malformed (the head then starts fresh)."""
    archs = _task_heads(data.get("architectures") or ())
    if not archs:
        return None
    pre = data.get("model_type") == PRE.MODEL_TYPE
    if archs[0].endswith("ForQuestionAnswering"):
        kind, theirs, ours = T.SQUAD, "qa_outputs.", "qa_outputs."
    elif archs[0].endswith("ForTokenClassification"):
        kind, theirs, ours = T.NER, "classifier.", "classifier."
    else:
        kind = T.REGRESSION if data.get("problem_type") == "regression" else T.CLASSIFICATION
        theirs, ours = ("classifier.out_proj." if pre else "classifier."), "classifier."
    if any(theirs + p not in hf_state for p in ("weight", "bias")):
        return None
    labels: tuple[str, ...] = ()
    if kind in (T.CLASSIFICATION, T.NER):
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
    return (kind, labels, "cls"), {ours + p: hf_state[theirs + p] for p in ("weight", "bias")}
