"""``berttrain finetune``: the fine-tuning loop. Reads top to bottom: set up, restore, train an epoch, evaluate,
keep the best, checkpoint. What the task kind decides is asked of its ``Task`` (``bertstream.trainer.finetune.tasks``); what
pretraining shares is in ``bertstream.trainer.runtime``.

One process or DDP under ``torchrun``: every rank trains on its share of each epoch's permutation (same
number of steps everywhere); evaluation runs each eval row on exactly one rank, the outputs are gathered,
and every rank scores them (so all agree on the best epoch); rank 0 writes the files.

Run folder: ``metrics.jsonl`` (train loss every ``log_every`` steps, eval metrics per epoch),
``checkpoints/step-N/`` (the best epoch's weights only, HF names ``bert.*`` + head), ``results.json``
(metrics per epoch, the best, the configuration) and the best epoch's predictions: ``predictions.tsv``
(classification, regression), ``predictions.conll`` (NER) or ``predictions.json`` (SQuAD); and ``resume/``: the
state at the end of the latest epoch (weights, optimizer, schedule, data epoch, every rank's RNG, results so far),
from which ``--resume auto`` continues a killed run with the same metrics as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from bertstream.schemas.redact import redact_values
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import rundir
from bertstream.trainer import runtime as R
from bertstream.trainer.data.config import dataset_key
from bertstream.trainer.data.workers import quiet_worker_init
from bertstream.trainer.errors import RunError
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.finetune.data import (
    EpochBatches,
    TaskData,
    TaskDataError,
    TaskDataset,
    check_pair,
    collate,
    load_task_data,
)
from bertstream.trainer.finetune.heads import load_encoder_state, reuse_head
from bertstream.trainer.finetune.health import finetune_warning
from bertstream.trainer.finetune.resume import RESULTS_FILE, RESUME_DIR, check_resume, plan_output, prepare_output
from bertstream.trainer.finetune.tasks import Task, get_task
from bertstream.trainer.metrics import MetricsLogger
from bertstream.trainer.model_config import BertConfig, with_dropout
from bertstream.trainer.optim.schedule import build_scheduler
from bertstream.trainer.optim.table import build_optimizer
from bertstream.trainer.progress import Progress
from bertstream.trainer.threads import apply as apply_threads
from bertstream.trainer.weights import Init, check_vocab, resolve_init


def plan_text(max_steps: int, epochs: int, steps_per_epoch: int) -> str:
    """How long the run is, in the unit the user chose (--max-steps or --epochs)."""
    if max_steps:
        return f"{max_steps} steps (--max-steps; an epoch is {steps_per_epoch} steps)"
    return f"{epochs} epoch{'' if epochs == 1 else 's'} x {steps_per_epoch} steps"


def load_inputs(cfg: FinetuneConfig, task: Task, info: D.DistInfo) -> tuple[TaskData, TaskData, Init, BertConfig]:
    """Both splits, the initial weights and the model configuration, checked against each other."""
    train = load_task_data(cfg.train_data, cfg.task, role="--train-data")
    evaluation = load_task_data(cfg.eval_data, cfg.task, role="--eval-data")
    check_pair(train, evaluation)
    init = resolve_init(cfg.init, train.vocab, seed=cfg.run.seed)
    check_vocab(init, train.manifest.vocab_sha256, train.root)
    config = with_dropout(init.config, cfg.dropout)
    longest = max(train.max_length(), evaluation.max_length())
    if longest > config.max_position_embeddings:
        raise TaskDataError(
            f"rows of up to {longest} tokens but the model has {config.max_position_embeddings} "
            "positions: rebuild the task data with a smaller --max-seq-length"
        )
    task.check(train)
    for line in init.notes:
        R.log(f"init: {line}", info)
    return train, evaluation, init, config


def build_model(
    task: Task,
    config: BertConfig,
    train: TaskData,
    init: Init,
    restored: ckpt.Loaded | None,
    cfg: FinetuneConfig,
    info: D.DistInfo,
) -> torch.nn.Module:
    """The task's model with the initial encoder weights (and head, if trained for this task), or the resumed run's."""
    raw = task.build_model(config, len(train.labels), seed=cfg.run.seed, pooling=cfg.pooling)
    if init.state is not None:
        load_encoder_state(raw, init.state)
        note = reuse_head(raw, init.head, (task.kind, train.labels, cfg.pooling))
        if note and restored is None:
            R.log(f"init: {note}", info)
    if restored is not None:
        R.load_state(raw, restored.model, "weights (model.safetensors)", restored.path, strict=True)
    return raw


def describe(train: TaskData, evaluation: TaskData, raw: torch.nn.Module, info: D.DistInfo) -> str:
    glue = f" ({train.glue})" if train.glue else ""
    return (
        f"{train.kind}{glue}: {len(train)} train rows, {len(evaluation)} eval rows, "
        f"{sum(p.numel() for p in raw.parameters()) / 1e6:.1f}M parameters, device {info.device}, "
        f"world {info.world_size}"
    )


def task_loader(data: TaskData, task: Task, batches: EpochBatches, num_workers: int, info: D.DistInfo) -> DataLoader:
    return DataLoader(
        TaskDataset(data, task),
        batch_sampler=batches,
        num_workers=num_workers,
        collate_fn=partial(collate, task=task, pad_id=data.pad_id),
        pin_memory=info.device.type == "cuda",
        worker_init_fn=quiet_worker_init,
    )


@torch.no_grad()
def predict(
    model: torch.nn.Module, task: Task, data: TaskData, batches: EpochBatches, cfg: FinetuneConfig, info: D.DistInfo
) -> tuple[list[Any], float | None]:
    """Every eval row's outputs (gathered from all ranks, indexed by row; see ``Task.row_outputs``) and the eval
    loss (batch losses weighted by rows; None when the data has no targets)."""
    mine: list[tuple[int, Any]] = []
    loss_sum, loss_rows = 0.0, 0
    with R.evaluating(model):
        for batch in task_loader(data, task, batches, 0, info):
            index = batch["index"].tolist()
            with R.autocast(info.device, cfg.run.precision):
                out = model(R.to_device(batch, info.device))
            if "loss" in out:
                loss_sum, loss_rows = loss_sum + float(out["loss"]) * len(index), loss_rows + len(index)
            mine.extend(zip(index, task.row_outputs(out, batch["attention_mask"].sum(1).tolist())))
    outputs: list[Any] = [None] * len(data)
    for part in D.all_gather_object(mine, info):
        for i, value in part:
            outputs[i] = value
    missing = sum(o is None for o in outputs)
    if missing:
        raise RuntimeError(f"evaluation produced no output for {missing} of {len(data)} rows")
    totals = D.all_reduce_sum(torch.tensor([loss_sum, float(loss_rows)], dtype=torch.float64, device=info.device), info)
    return outputs, (float(totals[0] / totals[1]) if totals[1] > 0 else None)


@dataclass(slots=True)
class Epochs:
    """What every epoch of the run trains with; :meth:`train` runs one."""

    training: R.Training
    loader: DataLoader
    metrics: MetricsLogger
    bar: Progress
    total_steps: int
    cfg: FinetuneConfig
    info: D.DistInfo

    def train(self, epoch: int) -> float:
        """One epoch, or what is left of the run; returns the mean step loss over the epoch and all ranks."""
        t, cfg, info = self.training, self.cfg, self.info
        epoch_loss = torch.zeros(2, dtype=torch.float64, device=info.device)  # [sum of step losses, steps]
        window = torch.zeros(2, dtype=torch.float64, device=info.device)  # the same since the last log line
        for batch in self.loader:
            with R.autocast(info.device, cfg.run.precision):
                out = t.model(R.to_device(batch, info.device))
            out["loss"].backward()
            grad_norm = t.optimizer_step()
            self.bar.update(1)
            loss = torch.stack([out["loss"].detach().double(), torch.ones((), dtype=torch.float64, device=info.device)])
            epoch_loss += loss
            window += loss
            if t.step % cfg.run.log_every == 0:
                s = D.all_reduce_sum(window.clone(), info).tolist()
                record = {
                    "step": t.step,
                    "epoch": epoch,
                    "loss": s[0] / s[1],
                    "lr": t.lr,
                    "grad_norm": float(grad_norm),
                }
                self.metrics.log(record)
                shown = f"epoch {epoch} loss {s[0] / s[1]:.4f} lr {t.lr:.3g}"
                self.bar.show(shown, loss=f"{s[0] / s[1]:.4f}", epoch=str(epoch))
                window.zero_()
            if t.step >= self.total_steps:
                break
        s = D.all_reduce_sum(epoch_loss.clone(), info).tolist()
        return s[0] / max(s[1], 1)


def new_results(
    cfg: FinetuneConfig, task: Task, train: TaskData, evaluation: TaskData, init: Init, config: BertConfig, **plan: int
) -> dict[str, Any]:
    """results.json before the first epoch: the task, configuration, model, initial weights and data."""
    return {
        "task": {
            "kind": task.kind,
            "glue": train.glue,
            "labels": list(train.labels),
            "primary_metric": task.primary_metric(train.glue),
            "metric_scale": task.metric_scale,
        },
        "config": cfg.to_dict(),
        "model": config.to_dict(),
        "init": init.describe(),
        "data": {
            name: {
                "root": d.root,
                "rows": len(d),
                "split": d.manifest.task.get("split"),
                "labeled": d.labeled,
                "vocab_sha256": d.manifest.vocab_sha256,
            }
            for name, d in (("train", train), ("eval", evaluation))
        },
        "world_size": plan["world_size"],
        "steps_per_epoch": plan["steps_per_epoch"],
        "total_steps": plan["total_steps"],
        "epochs": [],
        "best": None,
    }


def restore(restored: ckpt.Loaded, training: R.Training, batches: EpochBatches, results: dict, info: D.DistInfo) -> int:
    """Continue the run from the end of its latest epoch (the weights are loaded already): returns the next
    epoch."""
    training.restore(restored)
    state = restored.state
    epoch, epochs, best = state.get("epoch"), state.get("epochs"), state.get("best")
    # state.json is untrusted: a string epoch or a list of epochs failed in a traceback, an edited epoch repeated
    # or skipped epochs without a word. The epochs listed are the epochs done, 1 to epoch, each with its row.
    if not (
        isinstance(epoch, int)
        and not isinstance(epoch, bool)
        and isinstance(epochs, list)
        and len(epochs) == epoch >= 1
        and all(isinstance(row, dict) and row.get("epoch") == i for i, row in enumerate(epochs, 1))
        and (best is None or (isinstance(best, dict) and isinstance(best.get("value", 0), (int, float, type(None)))))
    ):
        raise RunError(
            f"{restored.path}/state.json: damaged fine-tuning state (epoch {epoch!r}, {_count(epochs)} epoch "
            f"row(s), best {type(best).__name__}); resume from an intact run, or start afresh with --overwrite"
        )
    try:
        batches.load_state_dict(restored.state["data"])
    except ValueError as e:
        raise RunError(
            f"{restored.path}: its data position does not fit this run ({e}); resume with as many processes as "
            f"saved it ({restored.config.get('world_size', '?')})"
        ) from None
    R.restore_rng(restored.rng, info, restored.path, restored.config.get("world_size", "?"))
    results["epochs"], results["best"] = restored.state["epochs"], restored.state["best"]
    R.log(f"resumed from {restored.path} after epoch {restored.state['epoch']} (step {restored.step})", info)
    return int(restored.state["epoch"]) + 1


def _count(rows: object) -> str:
    return str(len(rows)) if isinstance(rows, list) else f"a {type(rows).__name__} of"


@dataclass(frozen=True, slots=True)
class Saver:
    """Writes the run's two kinds of checkpoint: the best epoch's weights (``checkpoints/``, what ``--init`` and
    export read) and the latest epoch's full state (``resume/``, what ``--resume auto`` reads)."""

    run_dir: Path
    writer: R.CheckpointWriter

    def best(self, training: R.Training, predictions: tuple[str, str], **state: Any) -> None:
        """The best epoch's weights and its predictions file (name, text)."""
        self.writer.save(self.run_dir, training, state, resumable=False)
        if self.writer.info.is_main:
            ckpt.write_text_atomic(self.run_dir / predictions[0], predictions[1])

    def latest(self, training: R.Training, batches: EpochBatches, results: dict, epoch: int) -> None:
        """Everything an identical continuation needs, at the end of an epoch (a collective: every rank)."""
        state = {
            "epoch": epoch,
            "data": batches.state_dict(),
            "epochs": results["epochs"],
            "best": results["best"],
        }
        self.writer.save(self.run_dir / RESUME_DIR, training, state)


def evaluate(
    raw: torch.nn.Module, task: Task, data: TaskData, batches: EpochBatches, cfg: FinetuneConfig, info: D.DistInfo
) -> tuple[dict[str, Any], str, tuple[str, int] | None]:
    """(metrics with the eval loss, predictions file text, ``Task.one_class``) of the model now."""
    outputs, eval_loss = predict(raw, task, data, batches, cfg, info)
    scores, predictions = task.score(data, outputs, n_best=cfg.n_best, max_answer_length=cfg.max_answer_length)
    if eval_loss is not None:
        scores["loss"] = eval_loss
    return scores, predictions, task.one_class(data, outputs)


def finetune(cfg: FinetuneConfig, *, overwrite: bool = False) -> dict[str, Any]:
    info = D.setup(cfg.run.device)
    run_dir = Path(cfg.run.output)
    with rundir.held(run_dir, "berttrain finetune", info):
        return _finetune(cfg, info, overwrite)


def _finetune(cfg: FinetuneConfig, info: D.DistInfo, overwrite: bool) -> dict[str, Any]:
    # --- set up: every input is checked before the output folder is touched ----------------------------
    run_dir = Path(cfg.run.output)
    threads = apply_threads(cfg.run.threads, cfg.num_workers)
    with D.all_or_none(info):  # each rank checks what it sees (its node's data and folders); reported once
        task = get_task(cfg.task)
        restored, existing = plan_output(run_dir, cfg, overwrite)
        if restored is not None:
            check_resume(cfg, restored)
        train, evaluation, init, config = load_inputs(cfg, task, info)
    if dataset_key(cfg.train_data) == dataset_key(cfg.eval_data):
        R.log(
            f"warning: --eval-data {cfg.eval_data} is also --train-data: the best epoch is chosen on training rows",
            info,
        )
    prepare_output(run_dir, existing, info)
    metric = task.primary_metric(train.glue)
    raw = build_model(task, config, train, init, restored, cfg, info).to(info.device)
    model = R.wrap(raw, info)
    ranks = {"world_size": info.world_size, "rank": info.rank}
    train_batches = EpochBatches(len(train), cfg.batch_size, shuffle=True, seed=cfg.run.seed, **ranks)
    eval_batches = EpochBatches(len(evaluation), cfg.eval_batch, shuffle=False, **ranks)
    loader = task_loader(train, task, train_batches, cfg.num_workers, info)
    steps_per_epoch = len(train_batches)
    total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    epochs = math.ceil(total_steps / steps_per_epoch)
    o = cfg.optim
    optimizer = build_optimizer(raw, o.optimizer, o.lr, o.weight_decay, eps=o.adam_eps, layer_decay=o.layer_decay)
    scheduler = build_scheduler(optimizer, int(o.warmup_ratio * total_steps), total_steps)
    training = R.Training(model, raw, optimizer, scheduler, o.max_grad_norm)
    R.seed_dropout(cfg.run.seed, info)
    plan = {"world_size": info.world_size, "steps_per_epoch": steps_per_epoch, "total_steps": total_steps}
    results = new_results(cfg, task, train, evaluation, init, config, **plan)
    run_config = {"model": config.to_dict(), "finetune": redact_values(cfg.to_dict()), "task": results["task"]}
    run_config |= {"vocab_sha256": init.vocab.sha256, "world_size": info.world_size}
    run_config["lowercase"] = train.manifest.lowercase  # the data's casing: export-hf's tokenizer.json follows it
    saver = Saver(run_dir, R.CheckpointWriter(run_config, init.vocab.text(), info))

    # --- restore --------------------------------------------------------------------------------------
    first_epoch = 1
    if restored is not None:
        first_epoch = restore(restored, training, train_batches, results, info)
    metrics = MetricsLogger(run_dir, enabled=info.is_main, tensorboard=cfg.run.tensorboard)
    metrics.truncate_after(training.step)
    R.log(
        f"{describe(train, evaluation, raw, info)}, {threads}, {plan_text(cfg.max_steps, epochs, steps_per_epoch)}",
        info,
    )

    # --- train ----------------------------------------------------------------------------------------
    model.train()
    bar = Progress(total_steps, training.step, enabled=info.is_main, desc="finetune")
    run = Epochs(training, loader, metrics, bar, total_steps, cfg, info)
    for epoch in range(first_epoch, epochs + 1):
        train_batches.set_epoch(epoch - 1)
        train_loss = run.train(epoch)
        step = training.step

        # --- evaluate -----------------------------------------------------------------------------------
        scores, predictions, one_class = evaluate(raw, task, evaluation, eval_batches, cfg, info)
        numbers = {k: v for k, v in scores.items() if isinstance(v, (int, float))}
        metrics.log({"step": step, "split": "eval", "epoch": epoch, "train_loss": train_loss, **numbers})
        value = scores.get(metric)
        shown = f"eval {metric} {value:.4f}" if value is not None else "eval data unlabeled: predictions only"
        R.log(f"epoch {epoch} (step {step}): train loss {train_loss:.4f}, {shown}", info)
        results["epochs"].append({"epoch": epoch, "step": step, "train_loss": train_loss, "eval": scores})
        if one_class is not None:
            results["epochs"][-1]["one_class"] = list(one_class)

        # --- keep the best ------------------------------------------------------------------------------
        best = results["best"]
        if best is None or value is None or value > best["value"]:  # unlabeled eval data: the latest
            results["best"] = {"epoch": epoch, "step": step, "metric": metric, "value": value, "eval": scores}
            results["best"] |= {"checkpoint": str(ckpt.step_dir(run_dir, step)), "predictions": task.predictions_file}
            saver.best(training, (task.predictions_file, predictions), epoch=epoch, metric=metric, value=value)
        if info.is_main:
            ckpt.write_text_atomic(run_dir / RESULTS_FILE, json.dumps(redact_values(results), indent=2) + "\n")

        # --- checkpoint: the state --resume auto continues from -----------------------------------------
        saver.latest(training, train_batches, results, epoch)
        if step >= total_steps:
            break
    bar.close()
    # --- the end: one line when the run learned nothing ----------------------------------------------
    warning = finetune_warning(results, o.lr, config.hidden_size)
    results["warnings"] = [warning] if warning else []
    if warning:
        R.log(warning, info)
    if info.is_main:
        ckpt.write_text_atomic(run_dir / RESULTS_FILE, json.dumps(redact_values(results), indent=2) + "\n")
    metrics.close()
    D.teardown()
    return results
