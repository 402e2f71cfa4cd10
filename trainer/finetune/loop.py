"""``berttrain finetune``: the fine-tuning loop. Reads top to bottom: set up, build, train an epoch, evaluate,
keep the best, report.

One process or DDP under ``torchrun``: every rank trains on its share of each epoch's permutation (same
number of steps everywhere); evaluation runs each eval row on exactly one rank, the outputs are gathered,
and every rank scores them (so all agree on the best epoch); rank 0 writes the files.

Run folder: ``metrics.jsonl`` (train loss every ``log_every`` steps, eval metrics per epoch),
``checkpoints/step-N/`` (the best epoch's weights only, HF names ``bert.*`` + head), ``results.json``
(metrics per epoch, the best, the configuration) and the best epoch's predictions: ``predictions.tsv``
(classification, regression), ``predictions.conll`` (NER) or ``predictions.json`` (SQuAD).
"""

from __future__ import annotations

import json
import math
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from schemas import tasks as T
from trainer import checkpoint as ckpt
from trainer import distributed as D
from trainer.finetune import metrics as M
from trainer.finetune import ner as N
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.data import (
    EpochBatches,
    TaskData,
    TaskDataError,
    TaskDataset,
    check_pair,
    collate,
    load_task_data,
)
from trainer.finetune.heads import build_task_model, load_encoder_state
from trainer.finetune.squad import Window, predict_answers
from trainer.finetune.weights import check_vocab, resolve_init
from trainer.metrics import METRICS_FILE, MetricsLogger
from trainer.model import with_dropout
from trainer.optim import build_optimizer, build_scheduler
from trainer.pretrain import autocast, log

RESULTS_FILE = "results.json"
PREDICTIONS = {
    T.CLASSIFICATION: "predictions.tsv",
    T.REGRESSION: "predictions.tsv",
    T.NER: "predictions.conll",
    T.SQUAD: "predictions.json",
}
_OUTPUTS = (
    RESULTS_FILE,
    METRICS_FILE,
    "predictions.tsv",
    "predictions.conll",
    "predictions.json",
    ckpt.CHECKPOINTS,
    "tensorboard",
)


def primary_metric(kind: str, glue: str | None) -> str:
    """The number the best epoch is chosen by, as the BERT paper reports each task."""
    if kind == T.CLASSIFICATION:
        return {"cola": "mcc", "mrpc": "f1", "qqp": "f1"}.get(glue or "", "accuracy")
    return {T.REGRESSION: "spearman", T.NER: "f1", T.SQUAD: "f1"}[kind]


def plan_text(max_steps: int, epochs: int, steps_per_epoch: int) -> str:
    """How long the run is, in the unit the user chose (--max-steps or --epochs)."""
    if max_steps:
        return f"{max_steps} steps (--max-steps; an epoch is {steps_per_epoch} steps)"
    return f"{epochs} epoch{'' if epochs == 1 else 's'} x {steps_per_epoch} steps"


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "index"}


@torch.no_grad()
def predict(
    model: torch.nn.Module, data: TaskData, batches: EpochBatches, cfg: FinetuneConfig, info: D.DistInfo
) -> tuple[list[Any], float | None]:
    """Every eval row's outputs (gathered from all ranks, indexed by row) and the eval loss (batch losses
    weighted by rows; None when the data has no targets). Outputs: logits [C] (classification), a float (regression), token logits
    [tokens, C] (NER), (start [tokens], end [tokens]) logits (SQuAD)."""
    loader = DataLoader(
        TaskDataset(data),
        batch_sampler=batches,
        num_workers=0,
        collate_fn=partial(collate, kind=data.kind, pad_id=data.pad_id),
    )
    was_training = model.training
    model.eval()
    mine: list[tuple[int, Any]] = []
    loss_sum, loss_rows = 0.0, 0
    for batch in loader:
        index = batch["index"].tolist()
        lengths = batch["attention_mask"].sum(1).tolist()
        with autocast(info.device, cfg.precision):
            out = model(to_device(batch, info.device))
        if "loss" in out:
            loss_sum, loss_rows = loss_sum + float(out["loss"]) * len(index), loss_rows + len(index)
        if data.kind == T.SQUAD:
            start, end = out["start_logits"].cpu().numpy(), out["end_logits"].cpu().numpy()
            mine.extend((i, (start[r, :n], end[r, :n])) for r, (i, n) in enumerate(zip(index, lengths)))
        elif data.kind == T.NER:
            logits = out["logits"].cpu().numpy()
            mine.extend((i, logits[r, :n]) for r, (i, n) in enumerate(zip(index, lengths)))
        else:
            logits = out["logits"].cpu().numpy()
            mine.extend(zip(index, [float(x) for x in logits] if data.kind == T.REGRESSION else list(logits)))
    model.train(was_training)
    outputs: list[Any] = [None] * len(data)
    for part in D.all_gather_object(mine, info):
        for i, value in part:
            outputs[i] = value
    missing = sum(o is None for o in outputs)
    if missing:
        raise RuntimeError(f"evaluation produced no output for {missing} of {len(data)} rows")
    totals = D.all_reduce_sum(torch.tensor([loss_sum, float(loss_rows)], dtype=torch.float64, device=info.device), info)
    return outputs, (float(totals[0] / totals[1]) if totals[1] > 0 else None)


def score(data: TaskData, outputs: list[Any], cfg: FinetuneConfig) -> tuple[dict[str, Any], str]:
    """(metrics, predictions file text). Metrics are empty for unlabeled data (predictions only)."""
    c, labels, kind = data.columns, data.labels, data.kind
    if kind in (T.CLASSIFICATION, T.REGRESSION):
        gold = c[T.LABEL]
        if kind == T.CLASSIFICATION:
            pred = np.array([int(np.argmax(o)) for o in outputs])
            shown = [labels[p] for p in pred]
            gold_shown = [labels[g] for g in gold] if gold is not None else [""] * len(pred)
        else:
            pred = np.array(outputs, dtype=np.float64)
            shown = [f"{p:.6g}" for p in pred]
            gold_shown = [f"{g:.6g}" for g in gold] if gold is not None else [""] * len(pred)
        lines = ["row_id\tinput\tline\tprediction\tlabel"]
        for rid, p, g in zip(c[T.ROW_ID], shown, gold_shown):
            file_index, line, _ = T.split_row_id(int(rid))
            lines.append(f"{int(rid)}\t{file_index}\t{line}\t{p}\t{g}")
        text = "\n".join(lines) + "\n"
        if gold is None:
            return {}, text
        if kind == T.REGRESSION:
            g = np.asarray(gold, dtype=np.float64)
            return {
                "pearson": M.pearson(pred, g),
                "spearman": M.spearman(pred, g),
                "mse": float(np.mean((pred - g) ** 2)),
                "rows": len(g),
            }, text
        g = np.asarray(gold, dtype=np.int64)
        out: dict[str, Any] = {"accuracy": M.accuracy(pred, g), "rows": len(g)}
        if data.glue in ("mrpc", "qqp"):
            out["f1"] = M.binary_f1(pred, g, positive=labels.index("1"))
        if data.glue == "cola":
            out["mcc"] = M.matthews_corrcoef(pred, g)
        return out, text
    if kind == T.NER:
        sentences = N.sentence_tags(data, outputs)
        words, source = N.sentence_words(data, sentences)
        gold_tags = [[labels[i] for i in s.gold] for s in sentences]
        pred_tags = [[labels[i] for i in s.pred] for s in sentences]
        scores = M.conll_scores(gold_tags, pred_tags)
        scores["words_from"] = source
        return scores, N.conll_text(words, sentences, labels)
    # SQuAD: windows of each example in row order (= window order)
    windows: dict[int, list[Window]] = {}
    for i, (start, end) in enumerate(outputs):
        windows.setdefault(int(c[T.EXAMPLE_INDEX][i]), []).append(
            Window(start, end, c[T.OFFSET_START][i], c[T.OFFSET_END][i], c[T.MAX_CONTEXT][i])
        )
    examples = data.examples
    answers = predict_answers(
        windows,
        [e["context"] for e in examples],
        [e["id"] for e in examples],
        n_best=cfg.n_best,
        max_answer_length=cfg.max_answer_length,
    )
    scores = M.squad_scores(answers, {e["id"]: e["answers"]["text"] for e in examples})
    return scores, json.dumps(answers, ensure_ascii=False, indent=1) + "\n"


def finetune(cfg: FinetuneConfig, *, overwrite: bool = False) -> dict[str, Any]:
    # --- set up ---------------------------------------------------------------------------------------
    info = D.setup(cfg.device)
    run_dir = Path(cfg.output)
    if info.is_main:
        existing = [name for name in _OUTPUTS if (run_dir / name).exists()]
        if existing and not overwrite:
            raise FileExistsError(
                f"--output {run_dir} already holds a run ({', '.join(existing)}); "
                "choose another folder or pass --overwrite"
            )
        for name in existing:
            if (run_dir / name).is_dir():
                shutil.rmtree(run_dir / name)
            else:
                (run_dir / name).unlink()
        run_dir.mkdir(parents=True, exist_ok=True)
    D.barrier(info)
    train = load_task_data(cfg.train_data, cfg.task, role="--train-data")
    evaluation = load_task_data(cfg.eval_data, cfg.task, role="--eval-data")
    check_pair(train, evaluation)
    init = resolve_init(cfg.init, train.vocab, seed=cfg.seed)
    check_vocab(init, train.manifest.vocab["sha256"], train.root)
    config = with_dropout(init.config, cfg.dropout)
    longest = max(train.max_length(), evaluation.max_length())
    if longest > config.max_position_embeddings:
        raise TaskDataError(
            f"rows of up to {longest} tokens but the model has {config.max_position_embeddings} "
            "positions: rebuild the task data with a smaller --max-seq-length"
        )
    metric = primary_metric(cfg.task, train.glue)
    if train.glue in ("mrpc", "qqp") and "1" not in train.labels:
        raise TaskDataError(f"GLUE {train.glue} F1 needs the positive label '1', labels are {list(train.labels)}")
    for line in init.notes:
        log(f"init: {line}", info)

    # --- build ----------------------------------------------------------------------------------------
    model = build_task_model(cfg.task, config, len(train.labels), seed=cfg.seed)
    if init.state is not None:
        load_encoder_state(model, init.state)
    model.to(info.device)
    raw = model
    if info.enabled:
        model = DDP(model, device_ids=[info.local_rank] if info.device.type == "cuda" else None)
    train_batches = EpochBatches(
        len(train), cfg.batch_size, shuffle=True, seed=cfg.seed, world_size=info.world_size, rank=info.rank
    )
    eval_batches = EpochBatches(
        len(evaluation), cfg.eval_batch, shuffle=False, world_size=info.world_size, rank=info.rank
    )
    loader = DataLoader(
        TaskDataset(train),
        batch_sampler=train_batches,
        num_workers=cfg.num_workers,
        collate_fn=partial(collate, kind=cfg.task, pad_id=train.pad_id),
        pin_memory=info.device.type == "cuda",
    )
    steps_per_epoch = len(train_batches)
    total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    epochs = math.ceil(total_steps / steps_per_epoch)
    optimizer = build_optimizer(raw, "adamw", cfg.lr, cfg.weight_decay, eps=cfg.adam_eps)
    scheduler = build_scheduler(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)
    torch.manual_seed(cfg.seed * 1000 + info.rank)  # dropout: a stream per rank
    metrics = MetricsLogger(run_dir, enabled=info.is_main, tensorboard=cfg.tensorboard)
    task_info = {
        "kind": cfg.task,
        "glue": train.glue,
        "labels": list(train.labels),
        "primary_metric": metric,
        "metric_scale": "percent" if cfg.task == T.SQUAD else "fraction",
    }
    results: dict[str, Any] = {
        "task": task_info,
        "config": cfg.to_dict(),
        "model": config.to_dict(),
        "init": init.describe(),
        "data": {
            name: {
                "root": d.root,
                "rows": len(d),
                "split": d.manifest.task.get("split"),
                "labeled": d.labeled,
                "vocab_sha256": d.manifest.vocab["sha256"],
            }
            for name, d in (("train", train), ("eval", evaluation))
        },
        "world_size": info.world_size,
        "steps_per_epoch": steps_per_epoch,
        "total_steps": total_steps,
        "epochs": [],
        "best": None,
    }
    log(
        f"{cfg.task}{f' ({train.glue})' if train.glue else ''}: {len(train)} train rows, {len(evaluation)} eval rows, "
        f"{sum(p.numel() for p in raw.parameters()) / 1e6:.1f}M parameters, {plan_text(cfg.max_steps, epochs, steps_per_epoch)}, "
        f"device {info.device}, world {info.world_size}",
        info,
    )

    # --- train ----------------------------------------------------------------------------------------
    step = 0
    model.train()
    for epoch in range(1, epochs + 1):
        train_batches.set_epoch(epoch - 1)
        epoch_loss = torch.zeros(2, dtype=torch.float64, device=info.device)  # [sum, steps]
        window = torch.zeros(2, dtype=torch.float64, device=info.device)
        for batch in loader:
            with autocast(info.device, cfg.precision):
                out = model(to_device(batch, info.device))
            out["loss"].backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            loss = torch.stack([out["loss"].detach().double(), torch.ones((), dtype=torch.float64, device=info.device)])
            epoch_loss += loss
            window += loss
            if step % cfg.log_every == 0:
                s = D.all_reduce_sum(window.clone(), info).tolist()
                metrics.log(
                    {
                        "step": step,
                        "epoch": epoch,
                        "loss": s[0] / s[1],
                        "lr": scheduler.get_last_lr()[0],
                        "grad_norm": float(grad_norm),
                    }
                )
                window.zero_()
            if step >= total_steps:
                break

        # --- evaluate -----------------------------------------------------------------------------------
        s = D.all_reduce_sum(epoch_loss.clone(), info).tolist()
        train_loss = s[0] / max(s[1], 1)
        outputs, eval_loss = predict(raw, evaluation, eval_batches, cfg, info)
        scores, predictions = score(evaluation, outputs, cfg)
        if eval_loss is not None:
            scores["loss"] = eval_loss
        metrics.log(
            {
                "step": step,
                "split": "eval",
                "epoch": epoch,
                "train_loss": train_loss,
                **{k: v for k, v in scores.items() if isinstance(v, (int, float))},
            }
        )
        value = scores.get(metric)
        log(
            f"epoch {epoch} (step {step}): train loss {train_loss:.4f}"
            + (f", eval {metric} {value:.4f}" if value is not None else ", eval data unlabeled: predictions only"),
            info,
        )
        results["epochs"].append({"epoch": epoch, "step": step, "train_loss": train_loss, "eval": scores})

        # --- keep the best ------------------------------------------------------------------------------
        best = results["best"]
        if best is None or value is None or value > best["value"]:  # unlabeled eval data: the latest
            results["best"] = {
                "epoch": epoch,
                "step": step,
                "metric": metric,
                "value": value,
                "eval": scores,
                "checkpoint": str(ckpt.step_dir(run_dir, step)),
                "predictions": PREDICTIONS[cfg.task],
            }
            if info.is_main:
                ckpt.save(
                    run_dir,
                    step,
                    model_state=raw.state_dict(),
                    optimizer=None,
                    rng={f"rank0.{k}": v for k, v in ckpt.rng_state(info.device).items()},
                    state={"epoch": epoch, "metric": metric, "value": value, "data": train_batches.state_dict()},
                    config={
                        "model": config.to_dict(),
                        "finetune": cfg.to_dict(),
                        "task": task_info,
                        "vocab_sha256": init.vocab.sha256,
                    },
                    vocab_text=init.vocab.text(),
                    keep=1,
                )
                (run_dir / PREDICTIONS[cfg.task]).write_text(predictions, encoding="utf-8")
            D.barrier(info)
        if info.is_main:
            (run_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        if step >= total_steps:
            break
    metrics.close()
    D.teardown()
    return results
