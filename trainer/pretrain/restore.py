"""Where a pretraining run starts: the run folder (the checkpoint it continues, or none), the flags checked
against that checkpoint and the data, every rank agreeing on all of it, the model with its starting weights, and
the optimizer, schedule, data position and RNG restored from the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from bertstream.cli import options
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import run_folder
from bertstream.trainer import runtime as R
from bertstream.trainer.checkpoint_writer import restore_rng
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data import PretrainingLoader
from bertstream.trainer.errors import RunError
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.model_choice import ModelChoice
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.optim.schedule import Schedule
from bertstream.trainer.pretrain.inputs import (
    OpenedData,
    Weights,
    check_model,
    data_folders,
    input_paths,
    model_config,
    new_data_note,
    position_refusal,
)
from bertstream.trainer.pretrain.resume import extend_schedule, group_rates, same_data
from bertstream.trainer.training import Training, load_state


def plan_run_dir(cfg: TrainConfig, run_dir: Path) -> run_folder.Start:
    """How this run starts (the checkpoint it continues or starts from, or afresh); read-only, so that nothing is
    cleared before every input has been checked (:func:`bertstream.trainer.rundir.prepare` then clears and makes
    the folder)."""
    start = run_folder.plan_run(run_dir, cfg.run_folder, cfg.checkpoint, data=data_folders(cfg))
    run_folder.check_overlap(start, input_paths(cfg))
    return start


def resolve_model(cfg: TrainConfig, data: OpenedData, start: run_folder.Start) -> tuple[BertConfig, Weights | None]:
    """The architecture (and starting weights), after checking that the flags fit the checkpoint and the data."""
    config, weights = model_config(cfg, data.vocab, start)
    check_model(config, cfg, data, start)
    return config, weights


def build_model(
    cfg: TrainConfig,
    config: BertConfig,
    weights: Weights | None,
    restored: ckpt.Loaded | None,
    info: D.DistInfo,
) -> tuple[torch.nn.Module, BertForPreTraining]:
    """(the model to call: compiled and/or DDP, the plain module) with the starting weights, on the device."""
    raw = BertForPreTraining(config, seed=cfg.run.seeds.init, unpad=cfg.unpad)
    if weights is not None:
        load_state(raw, weights.state, "weights", weights.source, strict=True)
        for line in weights.notes:
            R.log(line, info)
    if restored is not None:
        load_state(raw, restored.model, "weights (model.safetensors)", restored.path, strict=True)
    raw.to(info.device)
    compiled: torch.nn.Module = raw
    if cfg.compiles(info.device.type):
        mode = None if cfg.compile_mode == "default" else cfg.compile_mode
        # dynamic: one graph for every batch length and masked-position count (a batch's T and P change from
        # one to the next); the default compiled the first shape, then recompiled at the second
        compiled = cast(torch.nn.Module, torch.compile(raw, mode=mode, dynamic=True))
        # no "duck sizing": a batch whose masked count happened to equal its batch size (P == B) tied the two
        # sizes in a guard, and the next batch recompiled (seen in a real run); read when the graph is traced
        import torch.fx.experimental._config as fx_config

        fx_config.use_duck_shape = False
    return R.wrap(compiled, info, find_unused_parameters=not cfg.objective.nsp), raw  # the NSP head's: no grads


def restore_position(
    cfg: TrainConfig,
    restored: ckpt.Loaded,
    training: Training,
    schedule: Schedule,
    loader: PretrainingLoader,
    info: D.DistInfo,
) -> None:
    """Continue the checkpoint's run: optimizer, schedule (re-planned to end at ``schedule.total``, the run's
    ``--max-steps``), step, data position and RNG."""
    training.restore(restored)
    old_end = extend_schedule(training.scheduler, schedule.warmup, schedule.total, schedule.shape)
    if old_end is not None:
        R.log(cfg.steps.replanned(schedule.shape, old_end, restored.step, group_rates(training.optimizer)), info)
    if same_data(loader.catalog.folders, restored.state, loader.catalog.fingerprint, restored.path):
        try:
            loader.load_state_dict(restored.state["data"])
        except ValueError as e:  # e.g. other weights: the position cannot be mapped onto this loader
            raise RunError(position_refusal(cfg.data, restored.path, e)) from None
    else:
        R.log(new_data_note(cfg.data, restored.path.name), info)
    saved_world = restored.config.get("world_size", info.world_size)
    if saved_world != info.world_size:  # elastic resume: per-rank streams cannot be mapped onto other ranks
        torch.manual_seed(cfg.run.seeds.dropout_after(info.rank, restored.step))
        R.log(
            f"{saved_world} processes saved {restored.path.name}, {info.world_size} resume it: the same "
            f"global batches continue; dropout streams restart ({ModelChoice.SAME_LOSSES})",
            info,
        )
    else:
        restore_rng(restored.rng, info, restored.path, saved_world)
    R.log(f"resumed from {restored.path} at step {restored.step}", info)


def shared_flags(cfg: TrainConfig) -> dict[str, Any]:
    """``flag -> value`` of every setting the ranks must agree on: all but those tagged :data:`options.PER_NODE`."""
    now = options.flat(cfg)
    return {
        leaf.flag or leaf.name: now[leaf.name]
        for leaf in options.leaves(TrainConfig)
        if options.PER_NODE not in leaf.tags
    }


def check_same_run(
    cfg: TrainConfig, restored: ckpt.Loaded | None, model: BertConfig, fingerprint: str, info: D.DistInfo
) -> None:
    """Every rank continues the same checkpoint and runs the same settings, data and code, or all refuse: a
    rank that resumed elsewhere, read another --data or took another --batch-size trained to exit 0 on a
    diverged model or data seen twice, and another --max-steps deadlocked."""
    D.agree({"checkpoint": ckpt.describe(restored) if restored else "none"}, info, run_folder.SHARED)
    facts = {
        **shared_flags(cfg),
        "model": model.to_dict(),
        "data fingerprint": fingerprint,
        "bertstream code": D.code_digest(),
    }
    D.agree(facts, info, "every rank must run the same flags, data and bertstream version")
