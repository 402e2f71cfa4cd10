"""Fine-tuning's evaluations and what follows from them: every eval row's outputs (gathered from all ranks), the
task's scores, the best evaluation kept (its weights and predictions), early stopping (``--patience``), and the
run's two kinds of checkpoint (:class:`Saver`). An evaluation runs at the end of every epoch and, with
``--eval-every N``, every N optimizer steps inside one (:class:`Judge`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from bertstream.schemas.redact import redact_values
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import runtime as R
from bertstream.trainer.checkpoint_writer import CheckpointWriter
from bertstream.trainer.data.config import IN_MAIN, Workers
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.finetune.data import EpochBatches, TaskData, TaskDataError, TaskDataset, collate
from bertstream.trainer.finetune.resume import RESULTS_FILE, RESUME_DIR
from bertstream.trainer.finetune.tasks import Task
from bertstream.trainer.metrics import MetricsLogger
from bertstream.trainer.training import Training


def task_loader(data: TaskData, task: Task, batches: EpochBatches, workers: Workers, info: D.DistInfo) -> DataLoader:
    """``data``'s rows in ``batches``, read by ``workers`` (the run's ``--num-workers``; an evaluation's are
    ``IN_MAIN``)."""
    return DataLoader(
        TaskDataset(data, task),
        batch_sampler=batches,
        collate_fn=partial(collate, task=task, pad_id=data.pad_id),
        pin_memory=info.device.type == "cuda",
        **workers.loader_settings(),
    )


@torch.no_grad()
def predict(
    model: torch.nn.Module, task: Task, data: TaskData, batches: EpochBatches, info: D.DistInfo, amp: R.Precision
) -> tuple[list[Any], float | None]:
    """Every eval row's outputs (gathered from all ranks, indexed by row; see ``Task.row_outputs``) and the eval
    loss (batch losses weighted by rows; None when the data has no targets), under the run's precision ``amp``."""
    mine: list[tuple[int, Any]] = []
    loss_sum, loss_rows = 0.0, 0
    with R.evaluating(model):
        for batch in task_loader(data, task, batches, IN_MAIN, info):
            index = batch["index"].tolist()
            with amp.autocast():
                out = model(R.to_device(batch, info.device))
            if "loss" in out:
                loss_sum, loss_rows = loss_sum + float(out["loss"]) * len(index), loss_rows + len(index)
            mine.extend(zip(index, task.row_outputs(out, batch)))
    outputs: list[Any] = [None] * len(data)
    for part in D.all_gather_object(mine, info):
        for i, value in part:
            outputs[i] = value
    missing = sum(o is None for o in outputs)
    if missing:
        raise RuntimeError(f"evaluation produced no output for {missing} of {len(data)} rows")
    totals = D.all_reduce_sum(torch.tensor([loss_sum, float(loss_rows)], dtype=torch.float64, device=info.device), info)
    return outputs, (float(totals[0] / totals[1]) if totals[1] > 0 else None)


def evaluate(
    raw: torch.nn.Module,
    task: Task,
    data: TaskData,
    batches: EpochBatches,
    cfg: FinetuneConfig,
    info: D.DistInfo,
    amp: R.Precision,
) -> tuple[dict[str, Any], str, tuple[str, int] | None]:
    """(metrics with the eval loss, predictions file text, ``Task.one_class``) of the model now."""
    outputs, eval_loss = predict(raw, task, data, batches, info, amp)
    scores, predictions = task.score(data, outputs, n_best=cfg.n_best, max_answer_length=cfg.max_answer_length)
    if eval_loss is not None:
        scores["loss"] = eval_loss
    return scores, predictions, task.one_class(data, outputs)


@dataclass(frozen=True, slots=True)
class Saver:
    """Writes the run's two kinds of checkpoint: the best epoch's weights (``checkpoints/``, what ``--init`` and
    export read) and the latest epoch's full state (``resume/``, what ``--resume auto`` reads)."""

    run_dir: Path
    writer: CheckpointWriter

    def best(self, training: Training, predictions: tuple[str, str], **state: Any) -> None:
        """The best epoch's weights and its predictions file (name, text)."""
        self.writer.save(self.run_dir, training, state, resumable=False)
        if self.writer.info.is_main:
            ckpt.write_text_atomic(self.run_dir / predictions[0], predictions[1])

    def latest(self, training: Training, batches: EpochBatches, results: dict, epoch: int) -> None:
        """Everything an identical continuation needs, at the end of an epoch (a collective: every rank)."""
        state = {
            "epoch": epoch,
            "data": batches.state_dict(),
            "epochs": results["epochs"],
            "evaluations": results["evaluations"],
            "best": results["best"],
            "early_stopping": results["early_stopping"],
        }
        self.writer.save(self.run_dir / RESUME_DIR, training, state)


def evaluations(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every evaluation of the run so far, in step order: the epochs' and those inside them (``--eval-every``)."""
    return sorted(
        [*results["epochs"], *results.get("evaluations", [])], key=lambda row: (row["step"], "train_loss" in row)
    )


def since_best(results: dict[str, Any]) -> int:
    """Evaluations after the best one (what ``--patience`` counts)."""
    best = results["best"]
    if best is None:
        return 0
    return sum(1 for row in evaluations(results) if row["step"] > best["step"])


@dataclass(frozen=True, slots=True)
class EarlyStopping:
    """``--patience``: stop after this many evaluations in a row without a better primary dev metric (0: train
    to the end). Read from the flags here only: :meth:`of` makes it (and refuses what it cannot watch), the
    :class:`Judge` applies it, results.json records it (:meth:`record`) and the run's last line says it
    (:func:`stopped_early`)."""

    patience: int

    @classmethod
    def of(cls, cfg: FinetuneConfig, evaluation: TaskData, role: str) -> EarlyStopping:
        """The run's, refused when ``evaluation`` has no labels: there is no dev metric to stop on. ``role``
        names the eval data's flag, as ``load_task_data``'s does."""
        if cfg.patience and not evaluation.labeled:
            raise TaskDataError(
                f"--patience {cfg.patience} stops on the dev metric, but {role} {evaluation.root} has no "
                f"labels: give labeled {role}, or leave --patience out"
            )
        return cls(cfg.patience)

    def record(self) -> dict[str, Any]:
        """results.json's ``early_stopping`` before the first evaluation."""
        return {"patience": self.patience, "stopped": False}

    def stops(self, waited: int) -> bool:
        """Whether ``waited`` evaluations after the best one end the run."""
        return bool(self.patience) and waited >= self.patience


def stopped_early(results: dict[str, Any]) -> str:
    """The clause the command's last line starts with when the run stopped early (empty when it did not)."""
    stop = results.get("early_stopping", {})
    return f"stopped early at step {stop['step']} (--patience {stop['patience']}); " if stop.get("stopped") else ""


@dataclass(slots=True)
class Judge:
    """One evaluation: scored, logged, recorded in results.json, the best kept; then whether to stop early
    (``--patience`` evaluations in a row without a better primary metric)."""

    task: Task
    data: TaskData
    batches: EpochBatches
    training: Training
    saver: Saver
    metrics: MetricsLogger
    results: dict[str, Any]
    metric: str
    cfg: FinetuneConfig
    info: D.DistInfo
    amp: R.Precision  # the run's autocast
    stopping: EarlyStopping
    stopped: bool = field(default=False)

    def __call__(self, epoch: int, step: int, train_loss: float | None = None) -> bool:
        """Evaluate the model at ``step`` (``train_loss``: the epoch's, at its end; None inside it); returns True
        when the run stops here (early stopping)."""
        cfg, info, results = self.cfg, self.info, self.results
        scores, predictions, one_class = evaluate(
            self.training.raw, self.task, self.data, self.batches, cfg, info, self.amp
        )
        numbers = {k: v for k, v in scores.items() if isinstance(v, (int, float))}
        where = {"step": step, "epoch": epoch} | ({"train_loss": train_loss} if train_loss is not None else {})
        self.metrics.log({"step": step, "split": "eval", "epoch": epoch, **where, **numbers})
        value = scores.get(self.metric)
        shown = f"eval {self.metric} {value:.4f}" if value is not None else "eval data unlabeled: predictions only"
        at = (
            f"epoch {epoch} (step {step}): train loss {train_loss:.4f}, "
            if train_loss is not None
            else (f"step {step} (epoch {epoch}, {cfg.steps.cadence()}): ")
        )
        R.log(f"{at}{shown}", info)
        row: dict[str, Any] = {**where, "eval": scores}
        if one_class is not None:
            row["one_class"] = list(one_class)
        results["epochs" if train_loss is not None else "evaluations"].append(row)

        best = results["best"]
        if best is None or value is None or value > best["value"]:  # unlabeled eval data: the latest
            results["best"] = {"epoch": epoch, "step": step, "metric": self.metric, "value": value, "eval": scores}
            results["best"] |= {
                "checkpoint": str(ckpt.step_dir(self.saver.run_dir, step)),
                "predictions": self.task.predictions_file,
            }
            self.saver.best(
                self.training, (self.task.predictions_file, predictions), epoch=epoch, metric=self.metric, value=value
            )
        waited = since_best(results)
        if self.stopping.stops(waited):
            best = results["best"]
            results["early_stopping"] |= {"stopped": True, "step": step, "epoch": epoch}
            R.log(
                f"early stop at step {step} (epoch {epoch}): {self.metric} not above {best['value']:.4f} (step "
                f"{best['step']}) in {waited} evaluations (--patience {self.stopping.patience}); the best is kept",
                info,
            )
            self.stopped = True
        self.write()
        return self.stopped

    def write(self) -> None:
        if self.info.is_main:
            text = json.dumps(redact_values(self.results), indent=2) + "\n"
            ckpt.write_text_atomic(self.saver.run_dir / RESULTS_FILE, text)
