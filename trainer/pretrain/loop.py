"""``berttrain pretrain``: the pretraining loop. Reads top to bottom: set up, restore, step, log,
evaluate, checkpoint.

Loss normalisation is exact across ranks and accumulation micro-steps: before a step, the masked-token
and sequence counts of all its micro-batches on all ranks are summed (one small all-reduce), and every
micro-batch contributes ``sum of its losses / global count``. So W ranks with batch B, or one rank with
B/k and ``--grad-accum k``, follow the same trajectory as one process with batch W*B (float rounding aside).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from bertstream.cli import options
from bertstream.schemas.redact import redact_values
from bertstream.schemas.vocab import Vocab
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import rundir
from bertstream.trainer import runtime as R
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data import PretrainingLoader
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import MetricsLogger, Throughput
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.model_config import BertConfig, pretraining_flops
from bertstream.trainer.optim.advice import pretrain_warning
from bertstream.trainer.optim.schedule import build_scheduler, warmup_note
from bertstream.trainer.optim.table import build_optimizer
from bertstream.trainer.pretrain.inputs import (
    OpenedData,
    check_seq_length,
    data_loader,
    eval_data_loader,
    input_notes,
    model_config,
    open_data,
)
from bertstream.trainer.pretrain.resume import check_new_phase, check_resume, extend_schedule, same_data
from bertstream.trainer.progress import Progress
from bertstream.trainer.threads import apply as apply_threads

_STAT_KEYS = ("mlm_sum", "mlm_correct", "mlm_count", "nsp_sum", "nsp_correct", "nsp_count")


def forever(loader: PretrainingLoader) -> Iterator[dict[str, torch.Tensor]]:
    while True:
        yield from loader


@dataclass(slots=True)
class Running:
    """Sums over the current logging interval (this rank)."""

    stats: torch.Tensor  # [6]: _STAT_KEYS
    steps: int = 0

    @classmethod
    def zero(cls, device: torch.device) -> Running:
        return cls(torch.zeros(len(_STAT_KEYS), dtype=torch.float64, device=device))

    def add(self, out: dict[str, torch.Tensor]) -> None:
        """Add one forward output's loss sums and counts (detached)."""
        with torch.no_grad():
            self.stats += torch.stack([out[k].detach().double() for k in _STAT_KEYS])

    def summary(self, info: D.DistInfo) -> dict[str, float]:
        """Means over all ranks: the one place the interval's sums are divided by its counts."""
        v = dict(zip(_STAT_KEYS, D.all_reduce_sum(self.stats.clone(), info).tolist()))
        mlm = v["mlm_sum"] / max(v["mlm_count"], 1)
        nsp = v["nsp_sum"] / max(v["nsp_count"], 1)
        out = {
            "loss": mlm + nsp,
            "mlm_loss": mlm,
            "nsp_loss": nsp,
            "mlm_accuracy": v["mlm_correct"] / max(v["mlm_count"], 1),
            "nsp_accuracy": v["nsp_correct"] / max(v["nsp_count"], 1),
        }
        if not v["nsp_count"]:  # --no-nsp: nothing to report
            del out["nsp_loss"], out["nsp_accuracy"]
        return out


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: PretrainingLoader, cfg: TrainConfig, info: D.DistInfo) -> dict[str, float]:
    """MLM and NSP loss and accuracy over the first ``eval_batches`` batches of the eval set (fixed order)."""
    loader.set_epoch(0)  # the same batches every time
    run = Running.zero(info.device)
    with R.evaluating(model):
        for i, batch in enumerate(loader):
            if i >= cfg.eval_batches:
                break
            with R.autocast(info.device, cfg.run.precision):
                run.add(model(R.to_device(batch, info.device), nsp=not cfg.objective.no_nsp))
    return run.summary(info)


def plan_run_dir(cfg: TrainConfig) -> ckpt.Loaded | None:
    """The checkpoint this run continues or starts from (None: afresh); read-only, so that nothing is cleared
    before every input has been checked (:func:`prepare_run_dir` then clears and makes the folder)."""
    run_dir = Path(cfg.run.output)
    restored = rundir.plan_run(
        run_dir,
        resume=cfg.checkpoint.resume,
        overwrite=cfg.checkpoint.overwrite,
        reset_optimizer=cfg.checkpoint.reset_optimizer,
        data=cfg.data.paths,
    )
    inputs = [("--eval-data", cfg.eval_data), ("--init-from", cfg.model.init_from)]
    inputs.append(("--model-config", cfg.model.model_config))
    rundir.check_overlap(run_dir, inputs, overwrite=cfg.checkpoint.overwrite)
    return restored


def prepare_run_dir(cfg: TrainConfig, info: D.DistInfo) -> None:
    """Clear the folder (``--overwrite``) and make it ready for writing; after every input has been checked."""
    run_dir = Path(cfg.run.output)
    D.barrier(info)  # every rank has read the folder before rank 0 changes it
    with D.all_or_none(info, rank0_only=True):  # and waits until it has, or fails with it
        if info.is_main:
            if cfg.checkpoint.overwrite:
                rundir.clear(run_dir)
                R.log(f"--overwrite: cleared {run_dir}", info)
            run_dir.mkdir(parents=True, exist_ok=True)
            for p in ckpt.remove_partial(run_dir):
                R.log(f"removed incomplete checkpoint {p.name} (a run was killed while writing it)")


def resolve_model(
    cfg: TrainConfig, data: OpenedData, restored: ckpt.Loaded | None, world_size: int
) -> tuple[BertConfig, dict | None, tuple[str, ...]]:
    """The architecture (and starting weights), after checking that the flags fit the checkpoint and the data."""
    vocab = data.vocab
    if restored is not None and not cfg.checkpoint.reset_optimizer:
        check_resume(cfg, restored.config, restored.path, restored.step, world_size=world_size)
    elif restored is not None:
        check_new_phase(cfg, restored.config, restored.path)
    config, init_state, init_notes = model_config(cfg, vocab, restored.config if restored else None)
    if config.vocab_size != len(vocab):
        raise RunError(f"model vocab_size {config.vocab_size} != the --data vocabulary of {len(vocab)} tokens")
    if restored is not None and restored.config.get("vocab_sha256", vocab.sha256) != vocab.sha256:
        raise RunError(f"{restored.path} was trained on another vocabulary than --data")
    check_seq_length(config, cfg, data)
    return config, init_state, init_notes


def build_model(
    cfg: TrainConfig,
    config: BertConfig,
    hf: tuple[dict | None, tuple[str, ...]],
    restored: ckpt.Loaded | None,
    info: D.DistInfo,
) -> tuple[torch.nn.Module, BertForPreTraining]:
    """(the model to call: compiled and/or DDP, the plain module) with the starting weights, on the device."""
    raw = BertForPreTraining(config, seed=cfg.run.seed)
    init_state, init_notes = hf
    if init_state is not None:
        R.load_state(raw, init_state, "weights", f"--init-from {cfg.model.init_from}", strict=True)
        for line in init_notes:
            R.log(line, info)
    if restored is not None:
        R.load_state(raw, restored.model, "weights (model.safetensors)", restored.path, strict=True)
    raw.to(info.device)
    compiled = cast(torch.nn.Module, torch.compile(raw)) if cfg.compile else raw
    return R.wrap(
        compiled, info, find_unused_parameters=cfg.objective.no_nsp
    ), raw  # --no-nsp: the NSP head gets no grads


def restore_position(
    cfg: TrainConfig, restored: ckpt.Loaded, training: R.Training, loader: PretrainingLoader, info: D.DistInfo
) -> None:
    """Continue the checkpoint's run: optimizer, schedule, step, data position and RNG."""
    training.restore(restored)
    old_end = extend_schedule(training.scheduler, cfg.optim.warmup_steps, cfg.max_steps, cfg.optim.lr_schedule)
    if old_end is not None:
        R.log(
            f"--max-steps {cfg.max_steps}: the linear decay now ends at step {cfg.max_steps} (was {old_end}); "
            f"learning rate {training.lr:.3g} at step {restored.step}",
            info,
        )
    if same_data(cfg.data.paths, restored.state, loader.catalog.fingerprint, restored.path):
        try:
            loader.load_state_dict(restored.state["data"])
        except ValueError as e:  # e.g. other weights: the position cannot be mapped onto this loader
            raise RunError(
                f"{restored.path}: its data position does not fit this run ({e}); resume with the run's "
                "--data, weights and shuffle settings, or start a new phase with --resume PATH --reset-optimizer"
            ) from None
    else:
        R.log(f"new --data since {restored.path.name}: the data position starts at the beginning", info)
    saved_world = restored.config.get("world_size", info.world_size)
    if saved_world != info.world_size:  # elastic resume: per-rank streams cannot be mapped onto other ranks
        torch.manual_seed((cfg.run.seed * 1000 + info.rank) * 1_000_003 + restored.step)
        R.log(
            f"{saved_world} processes saved {restored.path.name}, {info.world_size} resume it: the same "
            "global batches continue; dropout streams restart (the same losses need --dropout 0)",
            info,
        )
    else:
        R.restore_rng(restored.rng, info, restored.path, saved_world)
    R.log(f"resumed from {restored.path} at step {restored.step}", info)


def step_counts(micro: list[dict[str, torch.Tensor]], info: D.DistInfo) -> torch.Tensor:
    """[masked tokens, sequences, real tokens] of one optimizer step, summed over micro-batches and ranks."""
    counts = torch.tensor(
        [
            [
                float(b["masked_lm_weights"].sum()),
                float(len(b["next_sentence_labels"])),
                float(b["attention_mask"].sum()),
            ]
            for b in micro
        ],
        dtype=torch.float64,
    )
    return D.all_reduce_sum(counts.sum(0).to(info.device), info).cpu().clamp(min=1)


def train_step(
    model: torch.nn.Module,
    micro: list[dict[str, torch.Tensor]],
    totals: torch.Tensor,
    run: Running,
    config: BertConfig,
    cfg: TrainConfig,
    info: D.DistInfo,
) -> float:
    """Forward and backward over the step's micro-batches, their sums added to ``run``; returns model FLOPs.

    The step's loss is every micro-batch's loss sums over the step's global counts (``totals``): normalised
    once, exactly. DDP averages gradients over ranks, hence ``* world_size``."""
    flops = 0.0
    for i, batch in enumerate(micro):
        batch = R.to_device(batch, info.device)
        with R.no_sync(model, last=i == len(micro) - 1):
            with R.autocast(info.device, cfg.run.precision):
                out = model(batch, nsp=not cfg.objective.no_nsp)
            loss = out["mlm_sum"] / float(totals[0]) + out["nsp_sum"] / float(totals[1])
            (loss * info.world_size).backward()
        run.add(out)
        b, t = batch["input_ids"].shape
        flops += pretraining_flops(config, t, batch["masked_lm_positions"].shape[1]) * b
    return flops


def out_of_time(deadline: float | None, info: D.DistInfo) -> bool:
    """Whether ``--max-minutes`` is spent; rank 0's clock decides, so every rank stops at the same step."""
    if deadline is None:
        return False
    flag = torch.tensor([float(time.monotonic() >= deadline)], device=info.device)
    return bool(D.broadcast_tensor(flag, info).item())


def write_run_config(
    cfg: TrainConfig, config: BertConfig, vocab: Vocab, lowercase: bool, info: D.DistInfo
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
        (Path(cfg.run.output) / "config.json").write_text(json.dumps(run_config, indent=2) + "\n")
    return run_config


def data_position(cfg: TrainConfig, loader: PretrainingLoader) -> dict[str, Any]:
    """The checkpoint's record of where the data stream is, and of which dataset (see ``same_data``)."""
    position = {
        "data": loader.state_dict(),
        "data_paths": list(cfg.data.paths),
        "data_fingerprint": loader.catalog.fingerprint,
        "epoch": loader.epoch,
    }
    return redact_values(position)  # folder names in it (samples_by_dataset) are URLs too; a password is not kept


def describe(raw: torch.nn.Module, loader: PretrainingLoader, cfg: TrainConfig, info: D.DistInfo) -> str:
    return (
        f"{sum(p.numel() for p in raw.parameters()) / 1e6:.1f}M parameters, {loader.num_samples} instances, "
        f"{loader.steps_per_epoch} steps/epoch of {loader.global_batch_size * cfg.grad_accum} sequences, "
        f"{loader.dropped_per_epoch} dropped per epoch, device {info.device}, world {info.world_size}"
    )


def figures(record: dict[str, Any]) -> str:
    nsp = f" nsp_acc {record['nsp_accuracy']:.4f}" if "nsp_accuracy" in record else ""  # absent with --no-nsp
    return f"loss {record['loss']:.4f} mlm_acc {record['mlm_accuracy']:.4f}{nsp}"


def pretrain(cfg: TrainConfig) -> dict[str, Any]:
    info = D.setup(cfg.run.device, cfg.dist_timeout)
    run_dir = Path(cfg.run.output)
    try:
        with rundir.held(run_dir, "berttrain pretrain", info):
            D.agree({"run folder lock": rundir.lock_holder(run_dir) or "none"}, info, SHARED)
            return _pretrain(cfg, info)
    except Exception as e:
        lost = D.peer_lost(e, cfg.dist_timeout)
        if lost is None:
            raise
        raise lost from None


SHARED = (
    "every node must see the same run folder: put --output on a file system that all nodes mount at the same "
    "path (node-local folders resume from different checkpoints)"
)
# Flags that may differ between nodes: where each process computes and how it reads.
PER_NODE = ("device", "num_workers", "threads")


def check_same_run(
    cfg: TrainConfig, restored: ckpt.Loaded | None, model: BertConfig, fingerprint: str, info: D.DistInfo
) -> None:
    """Every rank continues the same checkpoint and runs the same settings, data and code, or all refuse: a
    rank that resumed elsewhere, read another --data or took another --batch-size trained to exit 0 on a
    diverged model or data seen twice, and another --max-steps deadlocked."""
    D.agree({"checkpoint": ckpt.describe(restored) if restored else "none"}, info, SHARED)
    now = options.flat(cfg)
    flags = {
        leaf.flag or leaf.name: now[leaf.name] for leaf in options.leaves(TrainConfig) if leaf.name not in PER_NODE
    }
    facts = {**flags, "model": model.to_dict(), "data fingerprint": fingerprint, "bertstream code": D.code_digest()}
    D.agree(facts, info, "every rank must run the same flags, data and bertstream version")


def _pretrain(cfg: TrainConfig, info: D.DistInfo) -> dict[str, Any]:
    # --- set up: every input is checked here, before the run folder is touched and before step 1 ------
    run_dir = Path(cfg.run.output)
    threads = apply_threads(cfg.run.threads, cfg.data.num_workers)
    with D.all_or_none(info):  # each rank checks what it sees (its node's data and folders); reported once
        for note in [*input_notes(cfg), warmup_note(cfg.optim.warmup_steps, cfg.max_steps)]:
            if note:
                R.log(note, info)
        restored = plan_run_dir(cfg)
        if cfg.deterministic:
            torch.use_deterministic_algorithms(True)
        data = open_data(cfg)  # every manifest and the vocabulary, read once for the run
        vocab, lowercase = data.vocab, data.lowercase
        config, init_state, init_notes = resolve_model(cfg, data, restored, info.world_size)
        loader = data_loader(cfg, data, info)
        eval_loader = eval_data_loader(cfg, data, info) if cfg.eval_data else None
    check_same_run(cfg, restored, config, loader.catalog.fingerprint, info)
    prepare_run_dir(cfg, info)

    # --- restore ----------------------------------------------------------------------------------
    model, raw = build_model(cfg, config, (init_state, init_notes), restored, info)
    o = cfg.optim
    optimizer = build_optimizer(raw, o.optimizer, o.lr, o.weight_decay, eps=o.adam_eps)
    scheduler = build_scheduler(optimizer, o.warmup_steps, cfg.max_steps, o.lr_schedule)
    training = R.Training(model, raw, optimizer, scheduler, o.max_grad_norm)
    R.seed_dropout(cfg.run.seed, info)
    if restored is not None and not cfg.checkpoint.reset_optimizer:
        restore_position(cfg, restored, training, loader, info)
    elif restored is not None:
        R.log(f"weights from {restored.path}; optimizer, schedule and data position start afresh", info)
    metrics = MetricsLogger(run_dir, enabled=info.is_main, tensorboard=cfg.run.tensorboard)
    metrics.truncate_after(training.step)
    writer = R.CheckpointWriter(write_run_config(cfg, config, vocab, lowercase, info), vocab.text(), info)
    R.log(f"{describe(raw, loader, cfg, info)}, {threads}", info)
    if loader.weighted:
        R.log(f"--data mix, an epoch of {loader.epoch_samples} samples: {loader.mix_text()}", info)

    # --- train --------------------------------------------------------------------------------------
    model.train()
    batches = forever(loader)
    run = Running.zero(info.device)
    meter = Throughput(info.device)
    bar = Progress(cfg.max_steps, training.step, enabled=info.is_main, desc="pretrain")
    deadline = time.monotonic() + cfg.max_minutes * 60 if cfg.max_minutes else None
    last_step = cfg.max_steps
    losses: list[tuple[int, float]] = []  # (step, training loss) of this run's first and last log records
    while training.step < last_step:
        micro = [next(batches) for _ in range(cfg.grad_accum)]
        totals = step_counts(micro, info)
        flops = train_step(model, micro, totals, run, config, cfg, info)
        grad_norm = training.optimizer_step()
        step = training.step
        D.at_step(step)
        run.steps += 1
        meter.add(int(totals[1]), int(totals[2]), flops)
        bar.update(1)
        if step < last_step and out_of_time(deadline, info):
            R.log(f"--max-minutes {cfg.max_minutes} reached at step {step}", info)
            last_step = step

        # --- log ------------------------------------------------------------------------------------
        if step % cfg.run.log_every == 0 or step == last_step:
            record: dict[str, Any] = {
                "step": step,
                **run.summary(info),
                "lr": training.lr,
                "grad_norm": float(grad_norm),
                "epoch": loader.epoch,
                **meter.read(),
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
        if eval_loader is not None and (step % cfg.eval_every == 0 or step == last_step):
            record = {"step": step, "split": "eval", **evaluate(model, eval_loader, cfg, info)}
            metrics.log(record)
            R.log(f"eval at step {step}: {figures(record)}", info)
            meter.read()  # evaluation time is not training throughput

        # --- checkpoint -----------------------------------------------------------------------------
        if step % cfg.checkpoint.checkpoint_every == 0 or step == last_step:
            path = writer.save(run_dir, training, data_position(cfg, loader), keep=cfg.checkpoint.keep_checkpoints)
            if path is not None:
                R.log(f"checkpoint {path}", info)
    bar.close()
    # judged from fresh weights only: a resumed, second-phase or --init-from run may rightly move its loss little
    fresh = losses and restored is None and cfg.model.init_from is None
    warning = pretrain_warning(losses[0], losses[-1], o.lr, config.hidden_size, o.warmup_steps) if fresh else None
    if warning:
        R.log(warning, info)
    metrics.close()
    D.teardown()
    return {"step": training.step, "run_dir": str(run_dir), "warnings": [warning] if warning else []}
