"""What a pretraining run starts from, checked against each other before the first step: the datasets'
vocabulary, the model's configuration (checkpoint, ``--init-from``, ``--model-config`` or preset), the training
and evaluation loaders, and the data's sequence length against the model's positions."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from bertstream.schemas.manifest import load_vocab as load_dataset_vocab
from bertstream.schemas.vocab import Vocab
from bertstream.trainer import distributed as D
from bertstream.trainer import runtime as R
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data import PretrainingLoader, VocabMismatchError, load_manifest
from bertstream.trainer.data.config import DYNAMIC_ONLY, dataset_key, weight_notes
from bertstream.trainer.data.loader import TooFewSamples
from bertstream.trainer.data.refs import read_text
from bertstream.trainer.errors import RunError
from bertstream.trainer.model_config import PRESET_NAMES, BertConfig, find_preset, with_dropout


def load_vocab(data_dirs: tuple[str, ...]) -> tuple[Vocab, bool]:
    """The datasets' vocabulary (all must share it) and its casing, from the first dataset folder."""
    manifests = [load_manifest(d) for d in data_dirs]
    hashes = {m.vocab_sha256 for m in manifests}
    if len(hashes) > 1:
        raise RunError(f"--data folders use different vocabularies: {sorted(h[:12] for h in hashes)}")
    m, root = manifests[0], data_dirs[0]
    try:
        vocab = load_dataset_vocab(m, lambda name: read_text(root, name), f"{root.rstrip('/')}/{m.vocab_file}")
    except VocabMismatchError as e:
        raise RunError(f"--data {e}") from None
    return vocab, m.lowercase


def model_config(cfg: TrainConfig, vocab: Vocab, restored: dict | None) -> tuple[BertConfig, dict | None, Any]:
    """(config, HF weights or None, HF load report) from the checkpoint, --init-from, --model-config or preset."""
    vocab_size = len(vocab)
    if restored is not None:  # the checkpoint's architecture; --dropout may still change for a second phase
        return with_dropout(BertConfig.from_dict(restored["model"]), cfg.model.dropout), None, None
    if cfg.model.init_from:
        from bertstream.trainer.hf import load_hf

        config, state, report = load_hf(cfg.model.init_from, seed=cfg.run.seed)
        check_init_vocab(cfg.model.init_from, report.vocab_sha256, vocab, cfg.data.paths[0])
        return with_dropout(config, cfg.model.dropout), state, report
    preset = find_preset(cfg.model.preset)
    if preset is None:
        raise ValueError(f"--model must be one of {', '.join(PRESET_NAMES)}; got {cfg.model.preset!r}")
    config = replace(preset(vocab_size), norm_placement=cfg.model.norm_placement)
    if cfg.model.model_config:
        try:
            overrides = json.loads(Path(cfg.model.model_config).read_text())
            config = BertConfig.from_dict({**config.to_dict(), **overrides, "vocab_size": vocab_size})
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            raise RunError(f"--model-config {cfg.model.model_config}: {e}") from None
    return with_dropout(config, cfg.model.dropout), None, None


def input_notes(cfg: TrainConfig) -> list[str]:
    """What the inputs are read as, where it may not be what was meant: a ``DIR:N`` weight beside a folder of
    that name, an eval set that is the training set."""
    notes = weight_notes(cfg.data.paths, cfg.data.weights)
    eval_data = cfg.eval_data
    if eval_data and dataset_key(eval_data) in {dataset_key(p) for p in cfg.data.paths}:
        notes.append(
            f"warning: --eval-data {eval_data} is also --data: its figures measure the training set, not held-out data"
        )
    return notes


def check_init_vocab(init_from: str, init_sha256: str | None, vocab: Vocab, data: str) -> None:
    """The ids of --data must mean the --init-from model's tokens (as ``finetune --init`` and ``embed`` check):
    the same vocabulary by content, not only by size."""
    if init_sha256 is None:
        raise VocabMismatchError(
            f"--init-from {init_from}: has no usable vocab.txt, so the --data tokens cannot be checked against "
            "the model's: put the vocabulary it was trained with beside its config.json"
        )
    if init_sha256 != vocab.sha256:
        raise VocabMismatchError(
            f"vocabulary mismatch: --data {data} was tokenised with vocab sha256 {vocab.sha256}, but --init-from "
            f"{init_from} has vocab sha256 {init_sha256}; rebuild the data with `bertprep ... --vocab "
            f"{Path(init_from) / 'vocab.txt'}` so that the ids mean the model's tokens"
        )


def data_loader(cfg: TrainConfig, vocab: Vocab, info: D.DistInfo) -> PretrainingLoader:
    """The training stream; opening it checks manifests, vocabulary and shard sizes (hashes with --skip-corrupt)."""
    try:
        return PretrainingLoader(
            replace(cfg.data, pin_memory=info.device.type == "cuda"),
            expected_vocab_sha256=vocab.sha256,
            world_size=info.world_size,
            rank=info.rank,
        )
    except (TooFewSamples, ValueError) as e:  # ValueError: a weight too small for one sample per epoch
        raise RunError(f"--data: {e}") from None


def eval_data_loader(cfg: TrainConfig, vocab: Vocab, info: D.DistInfo) -> PretrainingLoader:
    """The evaluation set, opened at start: a missing folder, another vocabulary or too few samples must not
    wait for the first evaluation (all steps since the last checkpoint would be lost)."""
    assert cfg.eval_data is not None  # called only with --eval-data
    fmt = cfg.data.format
    if fmt != "auto":  # --format names how to read --data; an eval set written in another format is read as it is
        held = load_manifest(cfg.eval_data).formats
        if fmt not in held:
            R.log(f"--eval-data {cfg.eval_data} has no {fmt} shards: read as {', '.join(held)}", info)
            fmt = "auto"
    try:
        return PretrainingLoader(
            # in stream order, with the shards' own masks, and a corrupt shard stops the run
            replace(
                cfg.data,
                paths=(cfg.eval_data,),
                weights=None,
                format=fmt,
                shuffle=False,
                num_workers=0,
                skip_corrupt=False,
                masking="static",
                **DYNAMIC_ONLY,
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
    for flag, paths in (
        ("--data", cfg.data.paths),
        ("--eval-data", (cfg.eval_data,) if cfg.eval_data else ()),
    ):
        for path in paths:
            length = load_manifest(path).shard_parameters.max_seq_length
            if length is not None and length > config.max_position_embeddings:
                raise RunError(
                    f"{flag} {path} holds sequences of up to {length} tokens (its max_seq_length) but the "
                    f"model has {config.max_position_embeddings} positions (max_position_embeddings): "
                    "rebuild the data with a smaller --max-seq-length, or use --model-config with more "
                    "max_position_embeddings"
                )
