"""``berttrain pretrain``: the pretraining loop. Reads top to bottom: set up, restore, step, log,
evaluate, checkpoint. Where the run starts from is :mod:`.restore`; one step's mechanics (its counts, forward and
backward, exact loss normalisation across ranks and micro-steps) are :mod:`.step`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bertstream.cli.errors import raise_if_swallowed
from bertstream.schemas.redact import redact_values
from bertstream.schemas.vocab import Vocab
from bertstream.trainer import distributed as D
from bertstream.trainer import peers, rundir
from bertstream.trainer import runtime as R
from bertstream.trainer.checkpoint_writer import CheckpointWriter, background_if_asked, background_writes
from bertstream.trainer.config import Steps, TrainConfig
from bertstream.trainer.data import PretrainingLoader
from bertstream.trainer.metrics import MetricsLogger, Throughput, tracked
from bertstream.trainer.model import num_parameters
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.optim.advice import pretrain_warning
from bertstream.trainer.optim.table import build_optimizer
from bertstream.trainer.pretrain.evaluation import Coverage
from bertstream.trainer.pretrain.inputs import data_loader, eval_data_loader, input_notes, mix_note, open_data
from bertstream.trainer.pretrain.restore import (
    build_model,
    check_same_run,
    plan_run_dir,
    resolve_model,
    restore_position,
)
from bertstream.trainer.pretrain.resume import continued
from bertstream.trainer.pretrain.step import Running, step_counts, train_step
from bertstream.trainer.progress import Progress
from bertstream.trainer.run_folder import SHARED
from bertstream.trainer.snapshot import Background
from bertstream.trainer.threads import apply as apply_threads
from bertstream.trainer.training import Training


def forever(loader: PretrainingLoader) -> Iterator[dict[str, torch.Tensor]]:
    while True:
        yield from loader


@torch.no_grad()
def warm_evaluation(
    model: torch.nn.Module, loader: PretrainingLoader, cfg: TrainConfig, info: D.DistInfo, amp: R.Precision
) -> None:
    """Compile the evaluation graph (eval mode: no dropout) before step 1: one eval batch forward, its result
    dropped. Compiled at the first evaluation instead, it stalled the run mid-way for as long as compiling took."""
    loader.set_epoch(0)
    with R.evaluating(model), amp.autocast():
        batch = next(iter(loader))
        model(R.to_device(batch, info.device), nsp=cfg.objective.nsp)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    loader: PretrainingLoader,
    cfg: TrainConfig,
    info: D.DistInfo,
    amp: R.Precision,
    coverage: Coverage,
) -> dict[str, Any]:
    """MLM and NSP loss, accuracy and MLM perplexity over the eval set (fixed order): all of it, or its first
    ``--eval-batches`` batches (``coverage``); ``instances`` of ``eval_instances`` say how much of it was read."""
    loader.set_epoch(0)  # the same batches every time
    run = Running.zero(info.device)
    batches = coverage.batches_of(loader.steps_per_epoch)
    with R.evaluating(model):
        for _, batch in zip(range(batches), loader):
            raise_if_swallowed()
            with amp.autocast():
                run.add(model(R.to_device(batch, info.device), nsp=cfg.objective.nsp))
    # every rank reads as many batches, each a slice of one global batch
    return {**run.summary(info), "instances": batches * loader.global_batch_size, "eval_instances": loader.num_samples}


def out_of_time(deadline: float | None, log_step: bool, info: D.DistInfo) -> bool:
    """Whether ``--max-minutes`` is spent, on the host clock. One process checks every step; several follow
    rank 0's clock at log steps only (the one broadcast then), so that every rank stops at the same step and
    no other step waits for a collective."""
    if deadline is None:
        return False
    late = time.monotonic() >= deadline
    if not info.enabled:
        return late
    if not log_step:
        return False
    flag = torch.tensor([float(late)]).to(info.device)
    return bool(D.broadcast_tensor(flag, info).item())


def throughput(meter: Throughput, info: D.DistInfo) -> dict[str, float]:
    """The meter's rates since its last read, sequences and tokens of all ranks (summed here, at a log step:
    each rank counted its own on the host)."""
    if info.enabled:
        sums = torch.tensor([meter.seqs, meter.tokens], dtype=torch.float64).to(info.device)
        meter.seqs, meter.tokens = (int(v) for v in D.all_reduce_sum(sums, info).tolist())
    return meter.read()


def write_run_config(
    cfg: TrainConfig, run_dir: Path, config: BertConfig, vocab: Vocab, lowercase: bool, info: D.DistInfo
) -> dict[str, Any]:
    """The resolved configuration, saved as ``config.json`` in the run folder and in every checkpoint."""
    run_config = {
        "model": config.to_dict(),
        "train": redact_values(cfg.to_dict()),  # a URL's password is not written to disk
        "vocab_sha256": vocab.sha256,
        "lowercase": lowercase,
        "world_size": info.world_size,
    }
    if info.is_main:
        (run_dir / "config.json").write_text(json.dumps(run_config, indent=2) + "\n")
    return run_config


def data_position(loader: PretrainingLoader) -> dict[str, Any]:
    """The checkpoint's record of where the data stream is, and of which dataset (see ``same_data``)."""
    position = {
        "data": loader.state_dict(),
        "data_paths": list(loader.catalog.folders),
        "data_fingerprint": loader.catalog.fingerprint,
        "epoch": loader.epoch,
    }
    return redact_values(position)  # folder names in it (samples_by_dataset) are URLs too; a password is not kept


def describe(raw: torch.nn.Module, loader: PretrainingLoader, steps: Steps, info: D.DistInfo) -> str:
    return (
        f"{num_parameters(raw) / 1e6:.1f}M parameters, {loader.num_samples} instances, "
        f"{loader.steps_per_epoch} steps/epoch of {loader.global_batch_size * steps.accum} sequences, "
        f"{loader.dropped_per_epoch} dropped per epoch, device {info.device}, world {info.world_size}"
    )


def figures(record: dict[str, Any]) -> str:
    nsp = f" nsp_acc {record['nsp_accuracy']:.4f}" if "nsp_accuracy" in record else ""  # absent with --no-nsp
    return f"loss {record['loss']:.4f} mlm_acc {record['mlm_accuracy']:.4f}{nsp}"


def pretrain(cfg: TrainConfig) -> dict[str, Any]:
    info = D.setup_run(cfg.run)
    try:
        with rundir.held(cfg.run_folder, "berttrain pretrain", info) as run_dir, background_writes() as writes:
            D.agree({"run folder lock": rundir.lock_holder(run_dir) or "none"}, info, SHARED)
            result = _pretrain(cfg, run_dir, info, background_if_asked(cfg.run, writes))
        D.teardown()  # the ranks end together, once the loop has returned (see distributed.teardown)
        return result
    except Exception as e:
        lost = peers.peer_lost(e, info.timeout_s)
        if lost is None:
            raise
        raise lost from None


def _pretrain(cfg: TrainConfig, run_dir: Path, info: D.DistInfo, writes: Background | None) -> dict[str, Any]:
    # --- set up: every input is checked here, before the run folder is touched and before step 1 ------
    threads = apply_threads(cfg.run)
    with D.all_or_none(info):  # each rank checks what it sees (its node's data and folders); reported once
        amp = R.Precision.of(cfg.run, info.device)
        for note in [*input_notes(cfg), cfg.warmup_note()]:
            if note:
                R.log(note, info)
        start = plan_run_dir(cfg, run_dir)
        cfg = continued(cfg, start, info.world_size)  # what the checkpoint knows, checked against the flags
        steps = cfg.steps  # its batch geometry, length and evaluation cadence
        if cfg.deterministic:
            torch.use_deterministic_algorithms(True)
        data = open_data(cfg)  # every manifest and the vocabulary, read once for the run
        vocab, lowercase = data.vocab, data.lowercase
        config, weights = resolve_model(cfg, data, start)
        loader = data_loader(cfg, data, info)
        eval_loader = eval_data_loader(cfg, data, info)
    check_same_run(cfg, start.restored, config, loader.catalog.fingerprint, info)
    rundir.prepare(start, info)

    # --- restore ----------------------------------------------------------------------------------
    model, raw = build_model(cfg, config, weights, start.restored, info)
    o = cfg.optim
    optimizer = build_optimizer(raw, o.optimizer, o.lr, o.weight_decay, eps=o.adam_eps, own=o.optimizer_settings)
    schedule = cfg.schedule  # the run's (a resume's settings taken by ``continued``)
    training = Training(model, raw, optimizer, schedule.build(optimizer), o.max_grad_norm)
    training.scaler = amp.grad_scaler()
    R.seed_dropout(cfg.run.seeds, info)
    if start.continued is not None:
        restore_position(cfg, start.continued, training, schedule, loader, info)
    elif start.restored is not None:
        R.log(f"weights from {start.restored.path}; optimizer, schedule and data position start afresh", info)
    metrics = MetricsLogger(run_dir, enabled=info.is_main, trackers=cfg.run.trackers, params=tracked(cfg))
    metrics.truncate_after(training.step)
    run_config = write_run_config(cfg, run_dir, config, vocab, lowercase, info)
    writer = CheckpointWriter(run_config, vocab.text(), info, writes=writes, announce=True)
    R.log(f"{describe(raw, loader, steps, info)}, {threads}", info)
    if loader.weighted:
        R.log(mix_note(loader), info)

    if eval_loader is not None and cfg.compiles(info.device.type):
        warm_evaluation(model, eval_loader, cfg, info, amp)

    # --- train --------------------------------------------------------------------------------------
    coverage = Coverage.of(cfg)
    model.train()
    batches = forever(loader)
    run = Running.zero(info.device)
    meter = Throughput(info.device)
    bar = Progress(steps.total, training.step, enabled=info.is_main, desc="pretrain")
    deadline = time.monotonic() + cfg.max_minutes * 60 if cfg.max_minutes else None
    last_step = steps.total
    losses: list[tuple[int, float]] = []  # (step, training loss) of this run's first and last log records
    last_eval: dict[str, Any] | None = None  # the summary's figures
    while training.step < last_step:
        micro = [next(batches) for _ in range(steps.accum)]
        counts = step_counts(micro, info)
        flops = train_step(model, micro, counts, run, raw, cfg, info, amp, training.scaler)
        grad_norm = training.optimizer_step()
        step = training.step
        peers.at_step(step)
        raise_if_swallowed()  # a signal lost in a library (a lazy import under a bare except) stops the run here
        run.steps += 1
        meter.add(counts.local.sequences, counts.local.tokens, *flops)
        bar.update(1)
        log_step = R.log_due(cfg.run, step)
        if step < last_step and out_of_time(deadline, log_step, info):
            R.log(f"--max-minutes {cfg.max_minutes} reached at step {step}", info)
            last_step = step

        # --- log ------------------------------------------------------------------------------------
        if log_step or step == last_step:
            training.check()  # a step that was skipped for a NaN or inf gradient ends the run here
            record: dict[str, Any] = {
                "step": step,
                **run.summary(info),
                "lr": training.lr,
                "grad_norm": float(grad_norm),
                "epoch": loader.epoch,
                **({"loss_scale": training.scaler.get_scale()} if training.scaler else {}),  # fp16
                **throughput(meter, info),
            }
            if loader.weighted:  # samples each folder has given so far, all ranks
                record["samples_by_dataset"] = loader.samples_by_dataset()
            metrics.log(record)
            losses = [losses[0] if losses else (step, record["loss"]), (step, record["loss"])]  # first, last
            bar.show(
                f"{figures(record)} {record['seq_per_s']:.0f} seq/s"
                + (f" samples {record['samples_by_dataset']}" if "samples_by_dataset" in record else ""),
                loss=f"{record['loss']:.3f}",
                mlm_acc=f"{record['mlm_accuracy']:.3f}",
            )
            run = Running.zero(info.device)

        # --- evaluate -------------------------------------------------------------------------------
        if eval_loader is not None and (steps.evaluates_at(step) or step == last_step):
            training.check()
            record = {"step": step, "split": "eval", **evaluate(model, eval_loader, cfg, info, amp, coverage)}
            metrics.log(record)
            R.log(f"eval at step {step}: {figures(record)} {coverage.extent(record)}", info)
            last_eval = record
            meter.read()  # evaluation time is not training throughput

        # --- checkpoint -----------------------------------------------------------------------------
        writer.poll(meet=R.log_due(cfg.run, step))  # the last background write: complete, or its error
        if step % cfg.checkpoint.checkpoint_every == 0 or step == last_step:
            training.check()  # never a checkpoint of a run that has diverged
            path = writer.save(run_dir, training, data_position(loader), keep=cfg.checkpoint.keep_checkpoints)
            if path is not None:
                R.log(f"checkpoint {path}", info)
    writer.finish()  # the final checkpoint complete (every rank agrees) before the run reports its end
    bar.close()
    loader.close()
    if eval_loader is not None:
        eval_loader.close()
    # judged from fresh weights only: a resumed, second-phase or --init-from run may rightly move its loss little
    fresh = losses and start.restored is None and weights is None
    warning = pretrain_warning(losses[0], losses[-1], o.lr, config.hidden_size, schedule) if fresh else None
    if warning:
        R.log(warning, info)
    metrics.close()
    return {"step": training.step, "run_dir": str(run_dir), "warnings": [warning] if warning else [], "eval": last_eval}
