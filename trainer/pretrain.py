"""``berttrain pretrain``: the pretraining loop. Reads top to bottom: set up, restore, step, log,
evaluate, checkpoint.

Loss normalisation is exact across ranks and accumulation micro-steps: before a step, the masked-token
and sequence counts of all its micro-batches on all ranks are summed (one small all-reduce), and every
micro-batch contributes ``sum of its losses / global count``. So W ranks with batch B, or one rank with
B/k and ``--grad-accum k``, follow the same trajectory as one process with batch W*B (float rounding aside).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from schemas.vocab import Vocab
from trainer import checkpoint as ckpt
from trainer import distributed as D
from trainer import rundir
from trainer.config import TrainConfig
from trainer.data import DataConfig, PretrainingLoader, VocabMismatchError, load_manifest
from trainer.data.loader import TooFewSamples
from trainer.data.refs import read_text
from trainer.errors import RunError
from trainer.metrics import MetricsLogger, Throughput
from trainer.model import PRESETS, BertConfig, BertForPreTraining, pretraining_flops, with_dropout
from trainer.optim import build_optimizer, build_scheduler
from trainer.resume import check_new_phase, check_resume, extend_schedule, same_data

_STAT_KEYS = ("mlm_sum", "mlm_correct", "mlm_count", "nsp_sum", "nsp_correct", "nsp_count")


def log(message: str, info: D.DistInfo | None = None) -> None:
    if info is None or info.is_main:
        print(f"[berttrain] {message}", file=sys.stderr, flush=True)


def load_vocab(data_dirs: tuple[str, ...]) -> tuple[Vocab, bool]:
    """The datasets' vocabulary (all must share it) and its casing, from the first dataset folder."""
    manifests = [load_manifest(d) for d in data_dirs]
    hashes = {m.vocab["sha256"] for m in manifests}
    if len(hashes) > 1:
        raise RunError(f"--data folders use different vocabularies: {sorted(h[:12] for h in hashes)}")
    m = manifests[0]
    vocab = Vocab.from_text(read_text(data_dirs[0], m.vocab.get("file", "vocab.txt")).decode("utf-8"), data_dirs[0])
    if vocab.sha256 != m.vocab["sha256"]:
        raise RunError(f"{data_dirs[0]}: vocab.txt does not match the manifest's vocab hash")
    return vocab, bool(m.vocab.get("lowercase", True))


def model_config(cfg: TrainConfig, vocab_size: int, restored: dict | None) -> tuple[BertConfig, dict | None, Any]:
    """(config, HF weights or None, HF load report) from the checkpoint, --init-from, --model-config or preset."""
    if restored is not None:  # the checkpoint's architecture; --dropout may still change for a second phase
        return with_dropout(BertConfig.from_dict(restored["model"]), cfg.dropout), None, None
    if cfg.init_from:
        from trainer.hf import load_hf

        config, state, report = load_hf(cfg.init_from, seed=cfg.seed)
        return with_dropout(config, cfg.dropout), state, report
    preset = PRESETS.get(cfg.model) or PRESETS.get(f"bert_{cfg.model}")
    if preset is None:
        raise ValueError(f"--model must be one of tiny, mini, small, medium, base, large; got {cfg.model!r}")
    config = preset(vocab_size)
    if cfg.model_config:
        try:
            overrides = json.loads(Path(cfg.model_config).read_text())
            config = BertConfig.from_dict({**config.to_dict(), **overrides, "vocab_size": vocab_size})
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            raise RunError(f"--model-config {cfg.model_config}: {e}") from None
    return with_dropout(config, cfg.dropout), None, None


def data_loader(cfg: TrainConfig, vocab: Vocab, info: D.DistInfo) -> PretrainingLoader:
    """The training stream; opening it checks manifests, vocabulary and shard sizes (hashes with --skip-corrupt)."""
    try:
        return PretrainingLoader(
            DataConfig(
                paths=cfg.data,
                batch_size=cfg.batch_size,
                num_workers=cfg.num_workers,
                seed=cfg.seed,
                shuffle_buffer=cfg.shuffle_buffer,
                skip_corrupt=cfg.skip_corrupt,
                format=cfg.data_format,
                pin_memory=info.device.type == "cuda",
            ),
            expected_vocab_sha256=vocab.sha256,
            world_size=info.world_size,
            rank=info.rank,
        )
    except TooFewSamples as e:
        raise RunError(f"--data: {e}") from None


def eval_data_loader(cfg: TrainConfig, vocab: Vocab, info: D.DistInfo) -> PretrainingLoader:
    """The evaluation set, opened at start: a missing folder, another vocabulary or too few samples must not
    wait for the first evaluation (all steps since the last checkpoint would be lost)."""
    try:
        return PretrainingLoader(
            DataConfig(
                paths=(cfg.eval_data,), batch_size=cfg.batch_size, shuffle=False, num_workers=0, format=cfg.data_format
            ),
            expected_vocab_sha256=vocab.sha256,
            world_size=info.world_size,
            rank=info.rank,
        )
    except TooFewSamples as e:
        raise RunError(f"--eval-data: {e}") from None
    except VocabMismatchError as e:
        raise RunError(f"--eval-data {cfg.eval_data} uses another vocabulary than --data ({e})") from None


def check_seq_length(config: BertConfig, cfg: TrainConfig) -> None:
    """Sequences longer than the model's positions crash at the first long batch: refuse them at start."""
    for flag, paths in (("--data", cfg.data), ("--eval-data", (cfg.eval_data,) if cfg.eval_data else ())):
        for path in paths:
            length = load_manifest(path).parameters.get("max_seq_length")
            if isinstance(length, int) and length > config.max_position_embeddings:
                raise RunError(
                    f"{flag} {path} holds sequences of up to {length} tokens (its max_seq_length) but the "
                    f"model has {config.max_position_embeddings} positions (max_position_embeddings): "
                    "rebuild the data with a smaller --max-seq-length, or use --model-config with more "
                    "max_position_embeddings"
                )


def forever(loader: PretrainingLoader) -> Iterator[dict[str, torch.Tensor]]:
    while True:
        yield from loader


def autocast(device: torch.device, precision: str):
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if use_bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass(slots=True)
class Running:
    """Sums over the current logging interval (this rank)."""

    stats: torch.Tensor  # [6]: _STAT_KEYS
    steps: int = 0

    @classmethod
    def zero(cls, device: torch.device) -> Running:
        return cls(torch.zeros(len(_STAT_KEYS), dtype=torch.float64, device=device))

    def summary(self, info: D.DistInfo) -> dict[str, float]:
        s = D.all_reduce_sum(self.stats.clone(), info).tolist()
        v = dict(zip(_STAT_KEYS, s))
        mlm = v["mlm_sum"] / max(v["mlm_count"], 1)
        nsp = v["nsp_sum"] / max(v["nsp_count"], 1)
        return {
            "loss": mlm + nsp,
            "mlm_loss": mlm,
            "nsp_loss": nsp,
            "mlm_accuracy": v["mlm_correct"] / max(v["mlm_count"], 1),
            "nsp_accuracy": v["nsp_correct"] / max(v["nsp_count"], 1),
        }


def accumulate(run: Running, out: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        mlm_sum = out["mlm_loss"].detach().double() * (out["mlm_count"].double() + 1e-5)
        nsp_sum = out["nsp_loss"].detach().double() * out["nsp_count"].double()
        run.stats += torch.stack(
            [
                mlm_sum,
                out["mlm_correct"].double(),
                out["mlm_count"].double(),
                nsp_sum,
                out["nsp_correct"].double(),
                out["nsp_count"].double(),
            ]
        )


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "instance_ids"}


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: PretrainingLoader, cfg: TrainConfig, info: D.DistInfo) -> dict[str, float]:
    """MLM and NSP loss and accuracy over the first ``eval_batches`` batches of the eval set (fixed order)."""
    loader.set_epoch(0)  # the same batches every time
    was_training = model.training
    model.eval()
    run = Running.zero(info.device)
    for i, batch in enumerate(loader):
        if i >= cfg.eval_batches:
            break
        with autocast(info.device, cfg.precision):
            accumulate(run, model(to_device(batch, info.device)))
    model.train(was_training)
    return run.summary(info)


def pretrain(cfg: TrainConfig) -> dict[str, Any]:
    # --- set up: every input is checked here, before step 1 -------------------------------------------
    info = D.setup(cfg.device)
    run_dir = Path(cfg.output)
    restored = rundir.plan_run(
        run_dir, resume=cfg.resume, overwrite=cfg.overwrite, reset_optimizer=cfg.reset_optimizer, data=cfg.data
    )
    D.barrier(info)  # every rank has read the folder before rank 0 changes it
    if info.is_main:
        if cfg.overwrite:
            rundir.clear(run_dir)
            log(f"--overwrite: cleared {run_dir}", info)
        run_dir.mkdir(parents=True, exist_ok=True)
        for p in ckpt.remove_partial(run_dir):
            log(f"removed incomplete checkpoint {p.name} (a run was killed while writing it)")
    D.barrier(info)
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
    vocab, lowercase = load_vocab(cfg.data)
    continuing = restored is not None and not cfg.reset_optimizer
    if continuing:
        check_resume(cfg, restored.config, restored.path, restored.step)
    elif restored is not None:
        check_new_phase(cfg, restored.config, restored.path)
    config, hf_state, hf_report = model_config(cfg, len(vocab), restored.config if restored else None)
    if config.vocab_size != len(vocab):
        raise RunError(f"model vocab_size {config.vocab_size} != the --data vocabulary of {len(vocab)} tokens")
    if restored is not None and restored.config.get("vocab_sha256", vocab.sha256) != vocab.sha256:
        raise RunError(f"{restored.path} was trained on another vocabulary than --data")
    loader = data_loader(cfg, vocab, info)
    eval_loader = eval_data_loader(cfg, vocab, info) if cfg.eval_data else None
    check_seq_length(config, cfg)

    # --- restore ----------------------------------------------------------------------------------
    model = BertForPreTraining(config, seed=cfg.seed)
    if hf_state is not None:
        model.load_state_dict(hf_state, strict=True)
        for line in hf_report.lines():
            log(line, info)
    if restored is not None:
        model.load_state_dict(restored.model, strict=True)
    model.to(info.device)
    raw = model
    if cfg.compile:
        model = torch.compile(model)
    if info.enabled:
        model = DDP(model, device_ids=[info.local_rank] if info.device.type == "cuda" else None)
    optimizer = build_optimizer(raw, cfg.optimizer, cfg.lr, cfg.weight_decay, eps=cfg.adam_eps)
    scheduler = build_scheduler(optimizer, cfg.warmup_steps, cfg.max_steps)
    step = 0
    torch.manual_seed(cfg.seed * 1000 + info.rank)  # dropout: a stream per rank
    if continuing:
        optimizer.load_state_dict(restored.optimizer)
        scheduler.load_state_dict(restored.state["scheduler"])
        old_end = extend_schedule(scheduler, cfg.warmup_steps, cfg.max_steps)
        if old_end is not None:
            log(
                f"--max-steps {cfg.max_steps}: the linear decay now ends at step {cfg.max_steps} (was {old_end}); "
                f"learning rate {scheduler.get_last_lr()[0]:.3g} at step {restored.step}",
                info,
            )
        if same_data(cfg.data, restored.state, loader.catalog.fingerprint):
            try:
                loader.load_state_dict(restored.state["data"])
            except ValueError as e:  # e.g. another world size: the position cannot be mapped onto this loader
                raise RunError(
                    f"{restored.path}: its data position does not fit this run ({e}); resume with as "
                    f"many processes as saved it ({restored.config.get('world_size', '?')}), or start a "
                    "new phase with --resume PATH --reset-optimizer"
                ) from None
        else:
            log(f"new --data since {restored.path.name}: the data position starts at the beginning", info)
        step = restored.step
        rng = {k.split(".", 1)[1]: v for k, v in restored.rng.items() if k.startswith(f"rank{info.rank}.")}
        if not rng:
            raise RunError(
                f"{restored.path}: rng.pt holds no state for rank {info.rank} (it was saved by "
                f"{restored.config.get('world_size', '?')} processes): resume with that many processes"
            )
        ckpt.set_rng_state(rng, info.device)
        log(f"resumed from {restored.path} at step {step}", info)
    elif restored is not None:
        log(f"weights from {restored.path}; optimizer, schedule and data position start afresh", info)
    metrics = MetricsLogger(run_dir, enabled=info.is_main, tensorboard=cfg.tensorboard)
    metrics.truncate_after(step)
    run_config = {
        "model": config.to_dict(),
        "train": cfg.to_dict(),
        "vocab_sha256": vocab.sha256,
        "lowercase": lowercase,
        "world_size": info.world_size,
    }
    if info.is_main:
        (run_dir / "config.json").write_text(json.dumps(run_config, indent=2) + "\n")
    log(
        f"{sum(p.numel() for p in raw.parameters()) / 1e6:.1f}M parameters, {loader.num_samples} instances, "
        f"{loader.steps_per_epoch} steps/epoch of {loader.global_batch_size * cfg.grad_accum} sequences, "
        f"{loader.dropped_per_epoch} dropped per epoch, device {info.device}, world {info.world_size}",
        info,
    )

    def save_checkpoint() -> None:
        states = {
            f"rank{r}.{k}": v
            for r, s in enumerate(D.all_gather_object(ckpt.rng_state(info.device), info))
            for k, v in s.items()
        }
        if info.is_main:
            path = ckpt.save(
                run_dir,
                step,
                model_state=raw.state_dict(),
                optimizer=optimizer.state_dict(),
                rng=states,
                state={
                    "scheduler": scheduler.state_dict(),
                    "data": loader.state_dict(),
                    "data_paths": list(cfg.data),
                    "data_fingerprint": loader.catalog.fingerprint,
                    "epoch": loader.epoch,
                },
                config=run_config,
                vocab_text=vocab.text(),
                keep=cfg.keep_checkpoints,
            )
            log(f"checkpoint {path}", info)
        D.barrier(info)

    # --- train --------------------------------------------------------------------------------------
    model.train()
    batches = forever(loader)
    run = Running.zero(info.device)
    meter = Throughput(info.device)
    bar = _Bar(cfg.max_steps, step, info.is_main)
    grad_norm = torch.zeros((), device=info.device)
    deadline = time.monotonic() + cfg.max_minutes * 60 if cfg.max_minutes else None
    last_step = cfg.max_steps
    while step < last_step:
        micro = [next(batches) for _ in range(cfg.grad_accum)]
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
        totals = D.all_reduce_sum(counts.sum(0).to(info.device), info).cpu().clamp(min=1)  # [masked, seqs, tokens]
        flops = 0.0
        for i, (batch, (_, n_seq, _)) in enumerate(zip(micro, counts.tolist())):
            batch = to_device(batch, info.device)
            sync = model.no_sync() if info.enabled and i < cfg.grad_accum - 1 else contextlib.nullcontext()
            with sync:
                with autocast(info.device, cfg.precision):
                    out = model(batch)
                # Sums over this micro-batch / global counts; DDP averages over ranks, hence * world_size.
                mlm = out["mlm_loss"] * ((out["mlm_count"] + 1e-5) / float(totals[0]))
                nsp = out["nsp_loss"] * (n_seq / float(totals[1]))
                ((mlm + nsp) * info.world_size).backward()
            accumulate(run, out)
            b, t = batch["input_ids"].shape
            flops += pretraining_flops(config, t, batch["masked_lm_positions"].shape[1]) * b
        grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        run.steps += 1
        meter.add(int(totals[1]), int(totals[2]), flops)
        bar.update(1)
        if deadline is not None and step < last_step:
            # Every rank must stop at the same step: rank 0's clock decides.
            out_of_time = torch.tensor([float(time.monotonic() >= deadline)], device=info.device)
            if D.broadcast_tensor(out_of_time, info).item():
                log(f"--max-minutes {cfg.max_minutes} reached at step {step}", info)
                last_step = step

        # --- log ------------------------------------------------------------------------------------
        if step % cfg.log_every == 0 or step == last_step:
            record = {
                "step": step,
                **run.summary(info),
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": float(grad_norm),
                "epoch": loader.epoch,
                **meter.read(),
            }
            metrics.log(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", mlm_acc=f"{record['mlm_accuracy']:.3f}")
            if not bar.interactive:
                log(
                    f"step {step}: loss {record['loss']:.4f} mlm_acc {record['mlm_accuracy']:.4f} "
                    f"nsp_acc {record['nsp_accuracy']:.4f} {record['seq_per_s']:.0f} seq/s",
                    info,
                )
            run = Running.zero(info.device)

        # --- evaluate -------------------------------------------------------------------------------
        if cfg.eval_data and (step % cfg.eval_every == 0 or step == last_step):
            record = {"step": step, "split": "eval", **evaluate(model, eval_loader, cfg, info)}
            metrics.log(record)
            log(
                f"eval at step {step}: loss {record['loss']:.4f} mlm_acc {record['mlm_accuracy']:.4f} "
                f"nsp_acc {record['nsp_accuracy']:.4f}",
                info,
            )
            meter.read()  # evaluation time is not training throughput

        # --- checkpoint -----------------------------------------------------------------------------
        if step % cfg.checkpoint_every == 0 or step == last_step:
            save_checkpoint()
    bar.close()
    metrics.close()
    D.teardown()
    return {"step": step, "run_dir": str(run_dir)}


class _Bar:
    """tqdm on an interactive rank-0 console; plain log lines otherwise."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.interactive = enabled and sys.stderr.isatty()
        self._bar = None
        if self.interactive:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def set_postfix(self, **kw) -> None:
        if self._bar is not None:
            self._bar.set_postfix(**kw)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
