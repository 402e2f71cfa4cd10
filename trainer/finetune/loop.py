"""``berttrain finetune``: the fine-tuning loop. Reads top to bottom: set up, restore, train an epoch, evaluate,
keep the best, checkpoint. What the task kind decides is asked of its ``Task`` (``bertstream.trainer.finetune.tasks``); what
pretraining shares is in ``bertstream.trainer.runtime``, ``.training`` and ``.checkpoint_writer``.

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

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from bertstream.cli.errors import raise_if_swallowed
from bertstream.schemas.redact import redact_values
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import rundir
from bertstream.trainer import runtime as R
from bertstream.trainer.checkpoint_writer import (
    CheckpointWriter,
    background_if_asked,
    background_writes,
)
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.finetune.data import (
    EpochBatches,
    TaskData,
)
from bertstream.trainer.finetune.evaluation import EarlyStopping, Judge, Saver, task_loader
from bertstream.trainer.finetune.health import finetune_warning
from bertstream.trainer.finetune.inputs import build_model, input_paths, load_inputs, training_batches
from bertstream.trainer.finetune.resume import (
    CONFIG_FILE,
    RESULTS_FILE,
    check_resume,
    plan_output,
    prepare_output,
    restore,
)
from bertstream.trainer.finetune.tasks import Task
from bertstream.trainer.metrics import MetricsLogger, tracked
from bertstream.trainer.model import num_parameters
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.optim.schedule import Schedule
from bertstream.trainer.optim.table import build_optimizer
from bertstream.trainer.progress import Progress
from bertstream.trainer.snapshot import Background
from bertstream.trainer.threads import apply as apply_threads
from bertstream.trainer.training import Training
from bertstream.trainer.weights import Init


def describe(train: TaskData, evaluation: TaskData, raw: torch.nn.Module, info: D.DistInfo) -> str:
    glue = f" ({train.glue})" if train.glue else ""
    return (
        f"{train.kind}{glue}: {len(train)} train rows, {len(evaluation)} eval rows, "
        f"{num_parameters(raw) / 1e6:.1f}M parameters, device {info.device}, "
        f"world {info.world_size}"
    )


@dataclass(slots=True)
class Epochs:
    """What every epoch of the run trains with; :meth:`train` runs one."""

    training: Training
    loader: DataLoader
    metrics: MetricsLogger
    bar: Progress
    total_steps: int
    cfg: FinetuneConfig
    info: D.DistInfo
    amp: R.Precision  # the run's autocast
    writer: CheckpointWriter | None = None  # its background write is looked at each step

    def train(self, epoch: int, judge: Judge) -> float | None:
        """One epoch, or what is left of the run; returns the mean step loss over the epoch and all ranks, or None
        when an evaluation inside it (``--eval-every``) stopped the run early.

        An optimizer step takes ``--grad-accum`` batches (the epoch's last step what is left): each batch's mean
        loss weighted by its share of the step's rows, so the step's loss is the mean over its rows (exact for the
        sentence tasks, one loss per row); DDP reduces gradients on the step's last batch only."""
        t, cfg, info = self.training, self.cfg, self.info
        steps = cfg.steps
        epoch_loss = torch.zeros(2, dtype=torch.float64, device=info.device)  # [sum of step losses, steps]
        window = torch.zeros(2, dtype=torch.float64, device=info.device)  # the same since the last log line
        batches = iter(self.loader)
        steps_left = steps.per_epoch(len(self.loader))  # optimizer steps in this epoch
        while micro := list(itertools.islice(batches, steps.accum)):
            rows = sum(len(b["index"]) for b in micro)
            step_loss = torch.zeros((), dtype=torch.float64, device=info.device)
            for i, batch in enumerate(micro):
                share = len(batch["index"]) / rows
                with R.no_sync(t.model, last=i == len(micro) - 1):
                    with self.amp.autocast():
                        out = t.model(R.to_device(batch, info.device))
                    t.backward(out["loss"] * share)
                step_loss += out["loss"].detach().double() * share
            grad_norm = t.optimizer_step()
            raise_if_swallowed()  # a Ctrl-C or SIGTERM a library swallowed stops the run here
            steps_left -= 1
            self.bar.update(1)
            if self.writer is not None:  # the last epoch's checkpoint, written meanwhile: complete, or its error
                self.writer.poll(meet=R.log_due(cfg.run, t.step))
            loss = torch.stack([step_loss, torch.ones((), dtype=torch.float64, device=info.device)])
            epoch_loss += loss
            window += loss
            if R.log_due(cfg.run, t.step):
                t.check()  # a step skipped for a NaN or inf gradient ends the run here (nothing read before)
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
            # inside the epoch only: its end is evaluated anyway
            if steps.evaluates_at(t.step) and steps_left > 0:
                t.check()  # never an evaluation (nor a best checkpoint) of a run that has diverged
                if judge(epoch, t.step):
                    return None
        t.check()  # before the epoch's evaluation and checkpoint
        s = D.all_reduce_sum(epoch_loss.clone(), info).tolist()
        return s[0] / max(s[1], 1)


def new_results(
    cfg: FinetuneConfig,
    task: Task,
    data: tuple[TaskData, TaskData],
    init: Init,
    config: BertConfig,
    stopping: EarlyStopping,
    **plan: int,
) -> dict[str, Any]:
    """results.json before the first epoch: the task, configuration, model, initial weights and data."""
    train, evaluation = data
    return {
        "task": {
            "kind": task.kind,
            "glue": train.glue,
            "labels": list(train.labels),
            "label_names": cfg.display_names(train.labels),  # what export-hf's id2label says (--label-names)
            "primary_metric": task.primary_metric(train.glue),
            "metric_scale": "fraction",  # every task's metrics, SQuAD's too (they were percentages)
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
        "evaluations": [],  # those inside epochs (--eval-every)
        "best": None,
        "early_stopping": stopping.record(),
    }


def finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    info = D.setup_run(cfg.run)
    with rundir.held(cfg.run_folder, "berttrain finetune", info) as run_dir, background_writes() as writes:
        results = _finetune(cfg, run_dir, info, background_if_asked(cfg.run, writes))
    D.teardown()  # the ranks end together, once the loop has returned (see distributed.teardown)
    return results


def _finetune(cfg: FinetuneConfig, run_dir: Path, info: D.DistInfo, writes: Background | None) -> dict[str, Any]:
    # --- set up: every input is checked before the output folder is touched ----------------------------
    threads = apply_threads(cfg.run)
    with D.all_or_none(info):  # each rank checks what it sees (its node's data and folders); reported once
        amp = R.Precision.of(cfg.run, info.device)
        task = cfg.task_kind
        start, existing = plan_output(run_dir, cfg, input_paths(cfg))
        restored = start.restored
        check_resume(cfg, start)
        train, evaluation, init, config, stopping = load_inputs(cfg, task, info)
    ranks = {"world_size": info.world_size, "rank": info.rank}
    train_batches = training_batches(cfg, train, info)
    prepare_output(run_dir, existing, info)
    metric = task.primary_metric(train.glue)
    raw = build_model(task, config, train, init, restored, cfg, info).to(info.device)
    model = R.wrap(raw, info)
    eval_batches = EpochBatches(len(evaluation), cfg.eval_batch, shuffle=False, **ranks)
    loader = task_loader(train, task, train_batches, cfg.workers, info)
    steps = cfg.steps
    steps_per_epoch = steps.per_epoch(len(train_batches))  # optimizer steps
    total_steps = steps.until(cfg.epochs, steps_per_epoch)
    epochs = math.ceil(total_steps / steps_per_epoch)
    o = cfg.optim
    optimizer = build_optimizer(
        raw, o.optimizer, o.lr, o.weight_decay, eps=o.adam_eps, layer_decay=o.layer_decay, own=o.optimizer_settings
    )
    training = Training(model, raw, optimizer, Schedule.finetuning(o, total_steps).build(optimizer), o.max_grad_norm)
    training.scaler = amp.grad_scaler()
    R.seed_dropout(cfg.run.seeds, info)
    plan = {"world_size": info.world_size, "steps_per_epoch": steps_per_epoch, "total_steps": total_steps}
    results = new_results(cfg, task, (train, evaluation), init, config, stopping, **plan)
    run_config = {"model": config.to_dict(), "finetune": redact_values(cfg.to_dict()), "task": results["task"]}
    run_config |= {"vocab_sha256": init.vocab.sha256, "world_size": info.world_size}
    run_config["lowercase"] = train.manifest.lowercase  # the data's casing: export-hf's tokenizer.json follows it
    saver = Saver(run_dir, CheckpointWriter(run_config, init.vocab.text(), info, writes=writes))
    if info.is_main:  # the run's flags, as each checkpoint holds them: what --config starts a run from
        ckpt.write_text_atomic(run_dir / CONFIG_FILE, json.dumps(run_config, indent=2) + "\n")

    # --- restore --------------------------------------------------------------------------------------
    first_epoch = 1
    if restored is not None:
        first_epoch = restore(restored, training, train_batches, results, info)
    metrics = MetricsLogger(run_dir, enabled=info.is_main, trackers=cfg.run.trackers, params=tracked(cfg))
    metrics.truncate_after(training.step)
    R.log(
        f"{describe(train, evaluation, raw, info)}, {threads}, {steps.plan(epochs, steps_per_epoch)}",
        info,
    )

    # --- train ----------------------------------------------------------------------------------------
    model.train()
    bar = Progress(total_steps, training.step, enabled=info.is_main, desc="finetune")
    run = Epochs(training, loader, metrics, bar, total_steps, cfg, info, amp, saver.writer)
    judge = Judge(task, evaluation, eval_batches, training, saver, metrics, results, metric, cfg, info, amp, stopping)
    for epoch in range(first_epoch, epochs + 1):
        if results["early_stopping"].get("stopped"):  # a resume of a run that stopped early: nothing is left
            break
        train_batches.set_epoch(epoch - 1)
        train_loss = run.train(epoch, judge)
        if train_loss is None:  # stopped early inside the epoch (--eval-every, --patience)
            break
        step = training.step

        # --- evaluate, keep the best, stop early ------------------------------------------------------------
        stop = judge(epoch, step, train_loss)

        # --- checkpoint: the state --resume auto continues from -----------------------------------------
        saver.latest(training, train_batches, results, epoch)
        if stop or step >= total_steps:
            break
    saver.writer.finish()  # the last epoch's checkpoint complete (every rank agrees) before the run reports its end
    bar.close()
    # --- the end: one line when the run learned nothing ----------------------------------------------
    warning = finetune_warning(results, o.lr, config.hidden_size)
    results["warnings"] = [warning] if warning else []
    if warning:
        R.log(warning, info)
    if info.is_main:
        ckpt.write_text_atomic(run_dir / RESULTS_FILE, json.dumps(redact_values(results), indent=2) + "\n")
    metrics.close()
    return results
