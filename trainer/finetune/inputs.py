"""What a fine-tuning run starts from, checked against each other before the first step: the training and
evaluation splits (``--train-data``, ``--eval-data``), the initial weights (``--init``: a checkpoint, a Hugging
Face folder or a random preset, :mod:`bertstream.trainer.weights`) and the model's configuration (``--dropout``),
the training batches of an epoch, and the model built with those weights; as :mod:`bertstream.trainer.pretrain.inputs`
is for pretraining."""

from __future__ import annotations

import torch

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer import runtime as R
from bertstream.trainer.data.config import unlike_training
from bertstream.trainer.errors import RunError
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.finetune.data import EpochBatches, TaskData, TaskDataError, load_task_data
from bertstream.trainer.finetune.evaluation import EarlyStopping
from bertstream.trainer.finetune.heads import load_encoder_state, reuse_head
from bertstream.trainer.finetune.tasks import HF_HEADS, Task
from bertstream.trainer.init_choice import named
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.training import load_state
from bertstream.trainer.weights import Init


def input_paths(cfg: FinetuneConfig) -> list[tuple[str, str | None]]:
    """``(flag, path)`` of every folder the run reads, which an ``--overwrite`` of the run folder must not delete
    (:func:`bertstream.trainer.run_folder.check_overlap`)."""
    return [("--train-data", cfg.train_data), cfg.eval_set.input_path(), cfg.starting.input_path]


def load_inputs(
    cfg: FinetuneConfig, task: Task, info: D.DistInfo
) -> tuple[TaskData, TaskData, Init, BertConfig, EarlyStopping]:
    """Both splits, the initial weights and the model configuration, checked against each other (and an
    evaluation split that is the training split said), and the early stopping the eval data allows."""
    train = load_task_data(cfg.train_data, task, role="--train-data")
    eval_role, folder = cfg.eval_set.input_path()  # what the errors about the eval data call it
    assert folder is not None  # (fine-tuning's is required)
    evaluation = load_task_data(folder, task, role=eval_role)
    check_pair(train, evaluation)
    init = cfg.starting.resolve(train.vocab, seed=cfg.run.seeds.init, heads=HF_HEADS)
    cfg.starting.check_vocab(init, train.manifest.vocab_sha256, train.root)
    config = cfg.trained(init.config)
    for role, split in (("--train-data", train), (eval_role, evaluation)):  # longer rows than the model's positions
        refusal = config.too_long(f"{role} {split.root}", task.max_length(split))
        if refusal is not None:
            raise TaskDataError(refusal)
    task.check(train)
    cfg.display_names(train.labels)  # --label-names names labels of this data, before the folder is touched
    stopping = EarlyStopping.of(cfg, evaluation, eval_role)
    for line in init.notes:
        R.log(f"init: {line}", info)
    same = cfg.eval_set.also_training([cfg.train_data], "--train-data", "the best epoch is chosen on training rows")
    if same is not None:
        R.log(same, info)
    return train, evaluation, init, config, stopping


def training_batches(cfg: FinetuneConfig, train: TaskData, info: D.DistInfo) -> EpochBatches:
    """This rank's batches of each epoch of the training split (shuffled per epoch); refused when one optimizer
    step would take more batches than an epoch holds, as pretraining's ``data_loader`` refuses it."""
    steps = cfg.steps
    batches = EpochBatches(
        len(train), steps.rows, shuffle=True, seed=cfg.run.seeds.order, world_size=info.world_size, rank=info.rank
    )
    epoch = f"--train-data ({len(train)} rows, {steps.per_process(info.world_size)})"
    refusal = steps.epoch_refusal(len(batches), "batches", epoch)  # a step was the epoch
    if refusal is not None:
        raise RunError(refusal)
    return batches


def check_pair(train: TaskData, evaluation: TaskData) -> None:
    """Training and evaluation splits must share the kind, the vocabulary and the label list (ids)."""
    if train.manifest.vocab_sha256 != evaluation.manifest.vocab_sha256:
        raise TaskDataError(
            unlike_training(
                f"--train-data {train.root}",
                evaluation.root,
                f"use different vocabularies (sha256 {train.manifest.vocab_sha256} vs {evaluation.manifest.vocab_sha256})",
            )
        )
    if train.labels != evaluation.labels:
        raise TaskDataError(
            unlike_training(
                f"--train-data {train.root}",
                evaluation.root,
                f"have different label lists: {list(train.labels)} vs {list(evaluation.labels)}; build the "
                f"evaluation split with `bertprep task ... --label-set-from {train.root}`",
            )
        )
    if not train.labeled or any(column is None for column in train.columns.values()):  # a label column of nulls
        raise TaskDataError(f"--train-data {train.root} is unlabeled: training needs labels")


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
    raw = cfg.build_model(config, train.labels)
    if init.state is not None:
        load_encoder_state(raw, init.state, named(init))
        note = reuse_head(raw, init.head, cfg.head_for(train.labels), pooled=task.hf.pooled)
        if note and restored is None:
            R.log(f"init: {note}", info)
    if restored is not None:
        load_state(raw, restored.model, "weights (model.safetensors)", restored.path, strict=True)
    return raw
