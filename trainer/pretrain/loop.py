"""``berttrain pretrain``: the pretraining loop. Reads top to bottom: set up, restore, step, log,
evaluate, checkpoint.

Loss normalisation is exact across ranks and accumulation micro-steps: the masked-token and sequence counts
of all a step's micro-batches on all ranks are summed (counted on the host where the batches were collated;
across ranks one small asynchronous all-reduce, never a read back), and every micro-batch contributes
``sum of its losses / global count``. A step that does not log reads no tensor into Python: the device runs
ahead of the host until a log step. So W ranks with batch B, or one rank with
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
import torch.distributed as dist

from bertstream.cli import options
from bertstream.cli.errors import raise_if_swallowed
from bertstream.schemas.redact import redact_values
from bertstream.schemas.vocab import Vocab
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import peers, rundir, unpad
from bertstream.trainer import runtime as R
from bertstream.trainer.config import TrainConfig, compiles
from bertstream.trainer.data import PretrainingLoader
from bertstream.trainer.data.collate import Batch, Counts
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import MetricsLogger, Throughput, tracked
from bertstream.trainer.model import BertForPreTraining, num_parameters
from bertstream.trainer.model_config import BertConfig, batch_flops
from bertstream.trainer.optim.advice import pretrain_warning
from bertstream.trainer.optim.schedule import build_scheduler, warmup_note
from bertstream.trainer.optim.table import build_optimizer
from bertstream.trainer.pretrain.evaluation import eval_extent, perplexity
from bertstream.trainer.pretrain.inputs import (
    OpenedData,
    check_seq_length,
    data_loader,
    eval_data_loader,
    input_notes,
    model_config,
    open_data,
)
from bertstream.trainer.pretrain.resume import continued, extend_schedule, group_rates, same_data
from bertstream.trainer.progress import Progress
from bertstream.trainer.snapshot import Background
from bertstream.trainer.threads import apply as apply_threads

# tokens, slots: real tokens and positions the encoder computed (padding included), summed like the losses
_STAT_KEYS = ("mlm_sum", "mlm_correct", "mlm_count", "nsp_sum", "nsp_correct", "nsp_count", "tokens", "slots")


def forever(loader: PretrainingLoader) -> Iterator[dict[str, torch.Tensor]]:
    while True:
        yield from loader


@dataclass(slots=True)
class Running:
    """Sums over the current logging interval (this rank)."""

    stats: torch.Tensor  # [8]: _STAT_KEYS
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
            "mlm_perplexity": perplexity(mlm),
            "nsp_loss": nsp,
            "mlm_accuracy": v["mlm_correct"] / max(v["mlm_count"], 1),
            "nsp_accuracy": v["nsp_correct"] / max(v["nsp_count"], 1),
            "tokens": int(v["tokens"]),
            "slots": int(v["slots"]),
        }
        if not v["nsp_count"]:  # --no-nsp: nothing to report
            del out["nsp_loss"], out["nsp_accuracy"]
        return out


@torch.no_grad()
def warm_evaluation(model: torch.nn.Module, loader: PretrainingLoader, cfg: TrainConfig, info: D.DistInfo) -> None:
    """Compile the evaluation graph (eval mode: no dropout) before step 1: one eval batch forward, its result
    dropped. Compiled at the first evaluation instead, it stalled the run mid-way for as long as compiling took."""
    loader.set_epoch(0)
    with R.evaluating(model), R.autocast(info.device, cfg.run.precision):
        batch = next(iter(loader))
        model(R.to_device(batch, info.device), nsp=not cfg.objective.no_nsp)


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: PretrainingLoader, cfg: TrainConfig, info: D.DistInfo) -> dict[str, Any]:
    """MLM and NSP loss, accuracy and MLM perplexity over the eval set (fixed order): all of it, or its first
    ``--eval-batches`` batches; ``instances`` of ``eval_instances`` say how much of it was read."""
    loader.set_epoch(0)  # the same batches every time
    run = Running.zero(info.device)
    batches = loader.steps_per_epoch if not cfg.eval_batches else min(cfg.eval_batches, loader.steps_per_epoch)
    with R.evaluating(model):
        for _, batch in zip(range(batches), loader):
            raise_if_swallowed()
            with R.autocast(info.device, cfg.run.precision):
                run.add(model(R.to_device(batch, info.device), nsp=not cfg.objective.no_nsp))
    # every rank reads as many batches, each a slice of one global batch
    return {**run.summary(info), "instances": batches * loader.global_batch_size, "eval_instances": loader.num_samples}


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
    raw = BertForPreTraining(config, seed=cfg.run.seed, unpad=cfg.unpad)
    init_state, init_notes = hf
    if init_state is not None:
        R.load_state(raw, init_state, "weights", f"--init-from {cfg.model.init_from}", strict=True)
        for line in init_notes:
            R.log(line, info)
    if restored is not None:
        R.load_state(raw, restored.model, "weights (model.safetensors)", restored.path, strict=True)
    raw.to(info.device)
    compiled: torch.nn.Module = raw
    if compiles(cfg.compile, info.device.type):
        mode = None if cfg.compile_mode == "default" else cfg.compile_mode
        # dynamic: one graph for every batch length and masked-position count (a batch's T and P change from
        # one to the next); the default compiled the first shape, then recompiled at the second
        compiled = cast(torch.nn.Module, torch.compile(raw, mode=mode, dynamic=True))
        # no "duck sizing": a batch whose masked count happened to equal its batch size (P == B) tied the two
        # sizes in a guard, and the next batch recompiled (seen in a real run); read when the graph is traced
        import torch.fx.experimental._config as fx_config

        fx_config.use_duck_shape = False
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
            f"--max-steps {cfg.max_steps}: the {cfg.optim.lr_schedule} decay now ends at step {cfg.max_steps} "
            f"(was {old_end}); learning rates at step {restored.step}, {group_rates(training.optimizer)}",
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


@dataclass(slots=True)
class StepCounts:
    """An optimizer step's counts: this rank's, born on the host where its batches were collated, and the
    divisors of its losses (masked tokens, sequences; all ranks, at least 1). On one rank the divisors are
    those host numbers; on several they are a device tensor whose all-reduce runs while the first micro-batch
    goes forward (:meth:`divisors` waits for it on the device, the host never reads it)."""

    local: Counts
    _divisors: torch.Tensor | tuple[float, float]
    _pending: Any = None  # the all-reduce's work handle until waited for

    def divisors(self) -> torch.Tensor | tuple[float, float]:
        if self._pending is not None:
            self._pending.wait()  # NCCL: the compute stream waits for the all-reduce; no host wait
            self._pending = None
            assert isinstance(self._divisors, torch.Tensor)
            self._divisors.clamp_(min=1)
        return self._divisors


def batch_counts(batch: dict[str, torch.Tensor]) -> Counts:
    """The counts a loader's batch carries (:class:`Batch`); another mapping's are read from its tensors
    (one read each: tests and tools that build batches by hand, never the training loop's loader)."""
    if isinstance(batch, Batch):
        return batch.counts
    weights, mask = batch["masked_lm_weights"], batch["attention_mask"]
    lengths = tuple(int(n) for n in mask.sum(1).tolist())
    return Counts(int(weights.sum().item()), len(batch["next_sentence_labels"]), sum(lengths), lengths)


def step_counts(micro: list[dict[str, torch.Tensor]], info: D.DistInfo) -> StepCounts:
    """The step's counts over its micro-batches; across ranks (several) by an asynchronous all-reduce."""
    local = sum((batch_counts(b) for b in micro), Counts(0, 0, 0))
    if not info.enabled:
        return StepCounts(local, (float(max(local.masked, 1)), float(max(local.sequences, 1))))
    # from pageable memory with non_blocking: copied to a staging buffer at once, no wait for the device
    sums = torch.tensor([local.masked, local.sequences], dtype=torch.float64).to(info.device, non_blocking=True)
    return StepCounts(local, sums, dist.all_reduce(sums, op=dist.ReduceOp.SUM, async_op=True))


def train_step(
    model: torch.nn.Module,
    micro: list[dict[str, torch.Tensor]],
    counts: StepCounts,
    run: Running,
    config: BertConfig,
    cfg: TrainConfig,
    info: D.DistInfo,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[float, float]:
    """Forward and backward over the step's micro-batches, their sums added to ``run``; returns model FLOPs,
    (useful, computed) (see ``model_config.batch_flops``).

    The step's loss is every micro-batch's loss sums over the step's global counts: normalised once, exactly.
    DDP averages gradients over ranks, hence ``* world_size``. Nothing is read back to the host."""
    flops = [0.0, 0.0]
    for i, batch in enumerate(micro):
        for k, f in enumerate(step_flops(batch, config, cfg, info.device)):
            flops[k] += f
        lengths = batch_counts(batch).lengths
        batch = R.to_device(batch, info.device)
        if cfg.unpad:  # the per-sequence attention's split, from the host's counts (no tensor read)
            batch[unpad.SIZES_KEY] = unpad.sizes(lengths)  # type: ignore[assignment]
        with R.no_sync(model, last=i == len(micro) - 1):
            with R.autocast(info.device, cfg.run.precision):
                out = model(batch, nsp=not cfg.objective.no_nsp)
            masked, sequences = counts.divisors()
            loss = out["mlm_sum"] / masked + out["nsp_sum"] / sequences
            R.backward(loss * info.world_size, scaler)
        run.add(out)
    return flops[0], flops[1]


def step_flops(
    batch: dict[str, torch.Tensor], config: BertConfig, cfg: TrainConfig, device: torch.device
) -> tuple[int, int]:
    """(useful, computed) FLOPs of one micro-batch, from the counts its loader made on the host (no read)."""
    counts = batch_counts(batch)
    shape = (batch["input_ids"].shape[1], batch["masked_lm_positions"].shape[1])  # T, P: shapes, not reads
    rows = unpad.rows(counts.tokens) if cfg.unpad else None
    dtype = R.compute_dtype(device, cfg.run.precision)
    varlen = unpad.per_sequence(device, dtype, config.attention_dropout, compiled=compiles(cfg.compile, device.type))
    return batch_flops(config, counts.lengths, [counts.masked], shape, rows=rows, varlen=varlen)


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
        f"{num_parameters(raw) / 1e6:.1f}M parameters, {loader.num_samples} instances, "
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
        with rundir.held(run_dir, "berttrain pretrain", info), R.background_writes() as writes:
            D.agree({"run folder lock": rundir.lock_holder(run_dir) or "none"}, info, SHARED)
            result = _pretrain(cfg, info, writes if cfg.run.async_checkpoint else None)
        D.teardown()  # here, not in _pretrain: its DDP model, which holds the process group, is gone with its frame
        return result
    except Exception as e:
        lost = peers.peer_lost(e, cfg.dist_timeout)
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


def _pretrain(cfg: TrainConfig, info: D.DistInfo, writes: Background | None) -> dict[str, Any]:
    # --- set up: every input is checked here, before the run folder is touched and before step 1 ------
    run_dir = Path(cfg.run.output)
    threads = apply_threads(cfg.run.threads, cfg.data.num_workers)
    with D.all_or_none(info):  # each rank checks what it sees (its node's data and folders); reported once
        R.check_precision(cfg.run.precision, info.device)
        for note in [*input_notes(cfg), warmup_note(cfg.optim.warmup_steps, cfg.max_steps)]:
            if note:
                R.log(note, info)
        restored = plan_run_dir(cfg)
        cfg = continued(cfg, restored, info.world_size)  # what the checkpoint knows, checked against the flags
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
    optimizer = build_optimizer(raw, o.optimizer, o.lr, o.weight_decay, eps=o.adam_eps, own=o.optimizer_settings)
    scheduler = build_scheduler(optimizer, o.warmup_steps, cfg.max_steps, o.lr_schedule)
    training = R.Training(model, raw, optimizer, scheduler, o.max_grad_norm)
    training.scaler = R.grad_scaler(info.device, cfg.run.precision)
    R.seed_dropout(cfg.run.seed, info)
    if restored is not None and not cfg.checkpoint.reset_optimizer:
        restore_position(cfg, restored, training, loader, info)
    elif restored is not None:
        R.log(f"weights from {restored.path}; optimizer, schedule and data position start afresh", info)
    metrics = MetricsLogger(run_dir, enabled=info.is_main, trackers=cfg.run.trackers, params=tracked(cfg))
    metrics.truncate_after(training.step)
    run_config = write_run_config(cfg, config, vocab, lowercase, info)
    writer = R.CheckpointWriter(run_config, vocab.text(), info, writes=writes, announce=True)
    R.log(f"{describe(raw, loader, cfg, info)}, {threads}", info)
    if loader.weighted:
        R.log(f"--data mix, an epoch of {loader.epoch_samples} samples: {loader.mix_text()}", info)

    if eval_loader is not None and compiles(cfg.compile, info.device.type):
        warm_evaluation(model, eval_loader, cfg, info)

    # --- train --------------------------------------------------------------------------------------
    model.train()
    batches = forever(loader)
    run = Running.zero(info.device)
    meter = Throughput(info.device)
    bar = Progress(cfg.max_steps, training.step, enabled=info.is_main, desc="pretrain")
    deadline = time.monotonic() + cfg.max_minutes * 60 if cfg.max_minutes else None
    last_step = cfg.max_steps
    losses: list[tuple[int, float]] = []  # (step, training loss) of this run's first and last log records
    last_eval: dict[str, Any] | None = None  # the summary's figures
    while training.step < last_step:
        micro = [next(batches) for _ in range(cfg.grad_accum)]
        counts = step_counts(micro, info)
        flops = train_step(model, micro, counts, run, config, cfg, info, training.scaler)
        grad_norm = training.optimizer_step()
        step = training.step
        peers.at_step(step)
        raise_if_swallowed()  # a signal lost in a library (a lazy import under a bare except) stops the run here
        run.steps += 1
        meter.add(counts.local.sequences, counts.local.tokens, *flops)
        bar.update(1)
        log_step = step % cfg.run.log_every == 0
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
        if eval_loader is not None and (step % cfg.eval_every == 0 or step == last_step):
            training.check()
            record = {"step": step, "split": "eval", **evaluate(model, eval_loader, cfg, info)}
            metrics.log(record)
            R.log(f"eval at step {step}: {figures(record)} {eval_extent(record, cfg.eval_batches)}", info)
            last_eval = record
            meter.read()  # evaluation time is not training throughput

        # --- checkpoint -----------------------------------------------------------------------------
        writer.poll(meet=step % cfg.run.log_every == 0)  # the last background write: complete, or its error
        if step % cfg.checkpoint.checkpoint_every == 0 or step == last_step:
            training.check()  # never a checkpoint of a run that has diverged
            path = writer.save(run_dir, training, data_position(cfg, loader), keep=cfg.checkpoint.keep_checkpoints)
            if path is not None:
                R.log(f"checkpoint {path}", info)
    writer.finish()  # the final checkpoint complete (every rank agrees) before the run reports its end
    bar.close()
    loader.close()
    if eval_loader is not None:
        eval_loader.close()
    # judged from fresh weights only: a resumed, second-phase or --init-from run may rightly move its loss little
    fresh = losses and restored is None and cfg.model.init_from is None
    warning = pretrain_warning(losses[0], losses[-1], o.lr, config.hidden_size, o.warmup_steps) if fresh else None
    if warning:
        R.log(warning, info)
    metrics.close()
    return {"step": training.step, "run_dir": str(run_dir), "warnings": [warning] if warning else [], "eval": last_eval}
