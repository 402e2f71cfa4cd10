"""One object per task kind (classification, regression, NER, SQuAD) that owns everything the kind decides: its
rows' checks and sequences, its batches (padded with the data's pad id; a row may hold several sequences), its
head and the Hugging Face class it is exported as (``hf``), how a batch's outputs become per-row outputs, the
metric the best epoch is chosen by, the scoring and the predictions file. The reader, the loop, the batching
code and the export ask the task; none of them branches on the kind. ``TASKS`` is the table of kinds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from bertstream.schemas import tasks as T
from bertstream.trainer.finetune import metrics as M
from bertstream.trainer.finetune import ner as N
from bertstream.trainer.finetune.data import PAD_MULTIPLE, Ragged, TaskData, TaskDataError, load_examples, pad_sequences
from bertstream.trainer.finetune.heads import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertstream.trainer.finetune.squad import Window, predict_answers
from bertstream.trainer.hf import tasks as HT
from bertstream.trainer.model_config import BertConfig

__all__ = ["HF_HEADS", "TASKS", "Classification", "Ner", "Regression", "Squad", "Task", "get_task"]


class Task:
    """The interface; subclasses fill in each part for their kind."""

    kind: ClassVar[str]  # its name: the manifests' kind and --task's choice
    layout: ClassVar[T.RowLayout]  # the contract's row layout it reads (the manifest's task.layout must be it)
    predictions_file: ClassVar[str]
    hf: ClassVar[HT.HFHead]  # the transformers class it is exported as; ``hf.pooled``: --pooling counts

    def sequences(self, data: TaskData) -> tuple[np.ndarray, np.ndarray]:
        """(the token count of every sequence, the row it is in), [S] each: one sequence per row here."""
        lengths = data.columns[T.INPUT_IDS].lengths()
        return lengths, np.arange(len(lengths))

    def max_length(self, data: TaskData) -> int:
        """The longest sequence the model reads (positions it needs)."""
        return int(self.sequences(data)[0].max(initial=0))

    def row_problems(self, data: TaskData, lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
        """(rows [N] bool, what is wrong with them) for the kind's own columns; ``lengths``: each row's tokens."""
        return []

    def check_data(self, data: TaskData, source: str) -> None:
        """Refuse a split whose labels or files beside the shards the kind cannot use (``source`` names it)."""

    def collate(
        self, rows: Sequence[Mapping[str, Any]], *, pad_id: int, multiple: int = PAD_MULTIPLE
    ) -> dict[str, Tensor]:
        """The batch of ``rows``: input_ids, token_type_ids, attention_mask [B, T] padded with ``pad_id`` to a
        multiple of ``multiple``, index [B] (dataset rows) and the targets (``batch_targets``)."""
        segments = [r["segment_a_length"] for r in rows] if "segment_a_length" in rows[0] else None
        batch = pad_sequences([r["input_ids"] for r in rows], segments, pad_id=pad_id, multiple=multiple)
        batch["index"] = torch.tensor([r["index"] for r in rows], dtype=torch.int64)
        batch.update(self.batch_targets(rows, batch["input_ids"].shape[1]))
        return batch

    def build_model(self, config: BertConfig, num_labels: int, *, seed: int = 0, pooling: str = "cls") -> nn.Module:
        """The head on the encoder; ``pooling`` (cls or mean) matters to the sentence heads only."""
        raise NotImplementedError

    def primary_metric(self, glue: str | None) -> str:
        """The number the best epoch is chosen by, as the BERT paper reports the task."""
        raise NotImplementedError

    def check(self, train: TaskData) -> None:
        """Refuse training data the scoring could not use (before step 1)."""

    def row_fields(self, columns: Mapping[str, Any], i: int) -> dict[str, Any]:
        """The task's inputs and targets of row ``i`` beyond ``index`` and ``input_ids`` (unpadded)."""
        raise NotImplementedError

    def batch_targets(self, rows: Sequence[Mapping[str, Any]], length: int) -> dict[str, Tensor]:
        """The head's target tensors for rows padded to ``length``; none for unlabeled rows."""
        raise NotImplementedError

    def row_outputs(self, out: Mapping[str, Tensor], batch: Mapping[str, Tensor]) -> list[Any]:
        """Per-row outputs of one batch, in batch order, cut to each row's real length where per token."""
        raise NotImplementedError

    def score(self, data: TaskData, outputs: Sequence[Any], *, n_best: int, max_answer_length: int) -> tuple[dict, str]:
        """(metrics, predictions file text) for every row's outputs; metrics are empty for unlabeled data."""
        raise NotImplementedError

    def one_class(self, data: TaskData, outputs: Sequence[Any]) -> tuple[str, int] | None:
        """(the label, how many predictions) when every prediction is the same label while the gold has
        several (a run that learned nothing but the majority); None otherwise, and for kinds without classes."""
        return None


def _one_class(pred: np.ndarray, gold: np.ndarray | None, labels: Sequence[str]) -> tuple[str, int] | None:
    if gold is None or len(pred) == 0 or len(np.unique(gold)) < 2 or len(np.unique(pred)) > 1:
        return None
    return labels[int(pred[0])], len(pred)


def _segment(columns: Mapping[str, Any], i: int) -> dict[str, Any]:
    return {"segment_a_length": int(columns[T.SEGMENT_A_LENGTH][i])}


def _segment_problems(data: TaskData, lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
    seg = data.columns[T.SEGMENT_A_LENGTH].astype(np.int64)
    return [((seg < 2) | (seg > lengths), "has a segment_a_length outside 2..its length")]


def _per_token(data: TaskData, names: Sequence[str], lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """Lists of one value per token: as long as the row's input_ids."""
    columns: Mapping[str, Ragged] = data.columns
    return [(columns[n].lengths() != lengths, f"has a {n} list of another length than input_ids") for n in names]


def _label_ids(data: TaskData, ids: np.ndarray, source: str, *, ignored: int | None = None) -> None:
    """Label ids index the manifest's label list (``ignored``: a value that marks no label)."""
    labels = data.labels
    if not labels:
        raise TaskDataError(f"{source}: the manifest has no label list (task.labels)")
    if len(ids):
        valid = (ids >= 0) & (ids < len(labels))
        if ignored is not None:
            valid |= ids == ignored
        if not valid.all():
            raise TaskDataError(f"{source}: label id {int(ids[~valid][0])} outside the {len(labels)} labels")


def _lengths(batch: Mapping[str, Tensor]) -> list[int]:
    return batch["attention_mask"].sum(-1).tolist()  # [B]: each row's real tokens


def input_names(data: TaskData) -> list[str]:
    """The manifest's inputs by file index, as a predictions file names them: the file name, or the whole path
    where two inputs share a name."""
    paths = [str(i.get("path", "")) for i in data.manifest.inputs]
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in paths]  # local paths and URLs alike
    return [n if names.count(n) == 1 else p for n, p in zip(names, paths)]


def _tsv(data: TaskData, shown: Sequence[str], gold: Sequence[str]) -> str:
    """predictions.tsv: the input file and the line each row came from (the input's own rows), prediction, label."""
    names = input_names(data)
    lines = ["input\tline\tprediction\tlabel"]
    for rid, p, g in zip(data.columns[T.ROW_ID], shown, gold):
        file_index, line, _ = T.split_row_id(int(rid))
        name = names[file_index] if file_index < len(names) else str(file_index)
        lines.append(f"{name}\t{line}\t{p}\t{g}")
    return "\n".join(lines) + "\n"


class Classification(Task):
    """[CLS] -> label; accuracy, plus F1 of label "1" for MRPC/QQP and Matthews correlation for CoLA."""

    kind = T.CLASSIFICATION
    layout = T.SEQUENCE_CLASS
    predictions_file = "predictions.tsv"
    hf = HT.HFHead(
        T.CLASSIFICATION,
        "ForSequenceClassification",
        "classifier.",
        pooled=True,
        labels=HT.CLASSES,
        problem_type="single_label_classification",
        reads=(None, "single_label_classification", "multi_label_classification"),
    )

    def row_problems(self, data: TaskData, lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
        return _segment_problems(data, lengths)

    def check_data(self, data: TaskData, source: str) -> None:
        labels = data.columns[T.LABEL]
        _label_ids(data, labels if labels is not None else np.zeros(0, np.int64), source)

    def build_model(self, config: BertConfig, num_labels: int, *, seed: int = 0, pooling: str = "cls") -> nn.Module:
        return BertForSequenceClassification(config, num_labels, seed=seed, pooling=pooling)

    def primary_metric(self, glue: str | None) -> str:
        return {"cola": "mcc", "mrpc": "f1", "qqp": "f1"}.get(glue or "", "accuracy")

    def check(self, train: TaskData) -> None:
        if train.glue in ("mrpc", "qqp") and "1" not in train.labels:
            raise TaskDataError(f"GLUE {train.glue} F1 needs the positive label '1', labels are {list(train.labels)}")

    def row_fields(self, columns: Mapping[str, Any], i: int) -> dict[str, Any]:
        labels = columns[T.LABEL]
        return {**_segment(columns, i), **({"label": labels[i]} if labels is not None else {})}

    def batch_targets(self, rows: Sequence[Mapping[str, Any]], length: int) -> dict[str, Tensor]:
        if "label" not in rows[0]:
            return {}
        return {"labels": torch.tensor([int(r["label"]) for r in rows], dtype=torch.int64)}

    def row_outputs(self, out: Mapping[str, Tensor], batch: Mapping[str, Tensor]) -> list[Any]:
        return list(out["logits"].cpu().numpy())  # [C] each

    def score(self, data: TaskData, outputs: Sequence[Any], *, n_best: int, max_answer_length: int) -> tuple[dict, str]:
        gold, labels = data.columns[T.LABEL], data.labels
        pred = np.array([int(np.argmax(o)) for o in outputs])
        gold_shown = [labels[g] for g in gold] if gold is not None else [""] * len(pred)
        text = _tsv(data, [labels[p] for p in pred], gold_shown)
        if gold is None:
            return {}, text
        g = np.asarray(gold, dtype=np.int64)
        out: dict[str, Any] = {"accuracy": M.accuracy(pred, g), "rows": len(g)}
        if data.glue in ("mrpc", "qqp"):
            out["f1"] = M.binary_f1(pred, g, positive=labels.index("1"))
        if data.glue == "cola":
            out["mcc"] = M.matthews_corrcoef(pred, g)
        return out, text

    def one_class(self, data: TaskData, outputs: Sequence[Any]) -> tuple[str, int] | None:
        gold = data.columns[T.LABEL]
        pred = np.array([int(np.argmax(o)) for o in outputs])
        return _one_class(pred, None if gold is None else np.asarray(gold, dtype=np.int64), data.labels)


class Regression(Classification):
    """[CLS] -> one float (MSE); Pearson, Spearman and MSE."""

    kind = T.REGRESSION
    layout = T.SEQUENCE_VALUE
    hf = HT.HFHead(
        T.REGRESSION,
        "ForSequenceClassification",
        "classifier.",
        pooled=True,
        labels=HT.VALUE,
        outputs=1,
        problem_type="regression",
        reads=("regression",),
    )

    def check_data(self, data: TaskData, source: str) -> None:
        pass  # a value, no label list

    def build_model(self, config: BertConfig, num_labels: int, *, seed: int = 0, pooling: str = "cls") -> nn.Module:
        return BertForSequenceClassification(config, 1, seed=seed, pooling=pooling)

    def primary_metric(self, glue: str | None) -> str:
        return "spearman"

    def check(self, train: TaskData) -> None:
        pass  # no classes: no positive label to find

    def batch_targets(self, rows: Sequence[Mapping[str, Any]], length: int) -> dict[str, Tensor]:
        if "label" not in rows[0]:
            return {}
        return {"labels": torch.tensor([float(r["label"]) for r in rows], dtype=torch.float32)}

    def row_outputs(self, out: Mapping[str, Tensor], batch: Mapping[str, Tensor]) -> list[Any]:
        return [float(x) for x in out["logits"].cpu().numpy()]

    def score(self, data: TaskData, outputs: Sequence[Any], *, n_best: int, max_answer_length: int) -> tuple[dict, str]:
        gold = data.columns[T.LABEL]
        pred = np.array(outputs, dtype=np.float64)
        gold_shown = [f"{g:.6g}" for g in gold] if gold is not None else [""] * len(pred)
        text = _tsv(data, [f"{p:.6g}" for p in pred], gold_shown)
        if gold is None:
            return {}, text
        g = np.asarray(gold, dtype=np.float64)
        return {
            "pearson": M.pearson(pred, g),
            "spearman": M.spearman(pred, g),
            "mse": float(np.mean((pred - g) ** 2)),
            "rows": len(g),
        }, text

    def one_class(self, data: TaskData, outputs: Sequence[Any]) -> tuple[str, int] | None:
        return None  # no classes: a constant prediction shows in the correlations


class Ner(Task):
    """A tag per token (the first sub-token of each word is scored); CoNLL span F1 over sentences."""

    kind = T.NER
    layout = T.TOKEN_LABELS
    predictions_file = "predictions.conll"
    hf = HT.HFHead(T.NER, "ForTokenClassification", "classifier.", pooled=False, labels=HT.CLASSES)

    def row_problems(self, data: TaskData, lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
        return _per_token(data, (T.LABELS, T.WORD_IDS, T.OWNED), lengths)

    def check_data(self, data: TaskData, source: str) -> None:
        _label_ids(data, data.columns[T.LABELS].values, source, ignored=T.IGNORE_INDEX)

    def build_model(self, config: BertConfig, num_labels: int, *, seed: int = 0, pooling: str = "cls") -> nn.Module:
        return BertForTokenClassification(config, num_labels, seed=seed)

    def primary_metric(self, glue: str | None) -> str:
        return "f1"

    def row_fields(self, columns: Mapping[str, Any], i: int) -> dict[str, Any]:
        return {"labels": columns[T.LABELS][i]}

    def batch_targets(self, rows: Sequence[Mapping[str, Any]], length: int) -> dict[str, Tensor]:
        labels = np.full((len(rows), length), T.IGNORE_INDEX, dtype=np.int64)  # [B, T]: padding is ignored
        for i, r in enumerate(rows):
            labels[i, : len(r["labels"])] = r["labels"]
        return {"labels": torch.from_numpy(labels)}

    def row_outputs(self, out: Mapping[str, Tensor], batch: Mapping[str, Tensor]) -> list[Any]:
        logits = out["logits"].cpu().numpy()  # [B, T, C]
        return [logits[r, :n] for r, n in enumerate(_lengths(batch))]

    def score(self, data: TaskData, outputs: Sequence[Any], *, n_best: int, max_answer_length: int) -> tuple[dict, str]:
        labels = data.labels
        sentences = N.sentence_tags(data, outputs)
        words, source = N.sentence_words(data, sentences)
        gold_tags = [[labels[i] for i in s.gold] for s in sentences]
        pred_tags = [[labels[i] for i in s.pred] for s in sentences]
        scores = M.conll_scores(gold_tags, pred_tags)
        scores["words_from"] = source
        return scores, N.conll_text(words, sentences, labels)

    def one_class(self, data: TaskData, outputs: Sequence[Any]) -> tuple[str, int] | None:
        sentences = N.sentence_tags(data, outputs)  # every word's tag (all 'O': no entity found)
        if not sentences:
            return None
        pred = np.concatenate([s.pred for s in sentences])
        return _one_class(pred, np.concatenate([s.gold for s in sentences]), data.labels)


class Squad(Task):
    """Start and end logits per token; the best span of each question's windows; exact match and F1."""

    kind = T.SQUAD
    layout = T.SPANS
    predictions_file = "predictions.json"
    hf = HT.HFHead(T.SQUAD, "ForQuestionAnswering", "qa_outputs.", pooled=False, labels=HT.NO_LABELS, outputs=2)

    def row_problems(self, data: TaskData, lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
        c = data.columns
        problems = _segment_problems(data, lengths) + _per_token(
            data, (T.OFFSET_START, T.OFFSET_END, T.MAX_CONTEXT), lengths
        )
        for name in (T.START_POSITION, T.END_POSITION):
            problems.append(((c[name] < 0) | (c[name] >= lengths), f"has a {name} outside its tokens"))
        return problems

    def check_data(self, data: TaskData, source: str) -> None:
        """The questions and contexts (``examples.jsonl``) the rows' windows index, v1.1-style."""
        c = data.columns
        data.examples = load_examples(data, source)
        index = c[T.EXAMPLE_INDEX]
        if len(index) and (index.min() < 0 or index.max() >= len(data.examples)):
            raise TaskDataError(f"{source}: example_index outside examples.jsonl ({len(data.examples)} lines)")
        if c[T.IS_IMPOSSIBLE].any() or any(e.get("is_impossible") for e in data.examples):
            raise TaskDataError(
                f"{source}: holds SQuAD v2.0 unanswerable questions; fine-tuning decodes "
                "v1.1-style answers only (no null answer)"
            )
        if [data.examples[i]["id"] for i in index] != c[T.EXAMPLE_ID]:
            raise TaskDataError(f"{source}: row example_id and examples.jsonl disagree")

    def build_model(self, config: BertConfig, num_labels: int, *, seed: int = 0, pooling: str = "cls") -> nn.Module:
        return BertForQuestionAnswering(config, seed=seed)

    def primary_metric(self, glue: str | None) -> str:
        return "f1"

    def row_fields(self, columns: Mapping[str, Any], i: int) -> dict[str, Any]:
        return {
            **_segment(columns, i),
            "start_position": int(columns[T.START_POSITION][i]),
            "end_position": int(columns[T.END_POSITION][i]),
        }

    def batch_targets(self, rows: Sequence[Mapping[str, Any]], length: int) -> dict[str, Tensor]:
        return {
            "start_positions": torch.tensor([r["start_position"] for r in rows], dtype=torch.int64),
            "end_positions": torch.tensor([r["end_position"] for r in rows], dtype=torch.int64),
        }

    def row_outputs(self, out: Mapping[str, Tensor], batch: Mapping[str, Tensor]) -> list[Any]:
        start, end = out["start_logits"].cpu().numpy(), out["end_logits"].cpu().numpy()  # [B, T] each
        return [(start[r, :n], end[r, :n]) for r, n in enumerate(_lengths(batch))]

    def score(self, data: TaskData, outputs: Sequence[Any], *, n_best: int, max_answer_length: int) -> tuple[dict, str]:
        c = data.columns
        windows: dict[int, list[Window]] = {}  # each example's windows in row order (= window order)
        for i, (start, end) in enumerate(outputs):
            windows.setdefault(int(c[T.EXAMPLE_INDEX][i]), []).append(
                Window(start, end, c[T.OFFSET_START][i], c[T.OFFSET_END][i], c[T.MAX_CONTEXT][i])
            )
        examples = data.examples
        answers = predict_answers(
            windows,
            [e["context"] for e in examples],
            [e["id"] for e in examples],
            n_best=n_best,
            max_answer_length=max_answer_length,
        )
        scores = M.squad_scores(answers, {e["id"]: e["answers"]["text"] for e in examples})
        return scores, json.dumps(answers, ensure_ascii=False, indent=1) + "\n"


TASKS: dict[str, Task] = {t.kind: t for t in (Classification(), Regression(), Ner(), Squad())}
HF_HEADS: tuple[HT.HFHead, ...] = tuple(t.hf for t in TASKS.values())  # what export and --init ask of the kinds


def get_task(kind: str) -> Task:
    if kind not in TASKS:
        raise ValueError(f"task kind must be one of {tuple(TASKS)}, got {kind!r}")
    return TASKS[kind]
