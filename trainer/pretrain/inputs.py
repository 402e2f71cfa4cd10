"""What a pretraining run starts from, checked against each other before the first step: the datasets'
vocabulary, the model's configuration (checkpoint, ``--init-from``, ``--model-config`` or preset), the training
and evaluation loaders, and the data's sequence length against the model's positions."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from bertstream.cli import options
from bertstream.schemas import json_text
from bertstream.schemas.manifest import Manifest
from bertstream.schemas.manifest import load_vocab as load_dataset_vocab
from bertstream.schemas.vocab import Vocab
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.trainer import distributed as D
from bertstream.trainer import runtime as R
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data import PretrainingLoader, VocabMismatchError, load_manifest
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.loader import TooFewSamples
from bertstream.trainer.data.refs import read_text
from bertstream.trainer.errors import RunError
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.run_folder import Start, new_phase
from bertstream.trainer.weights import check_vocab, resolve_init


@dataclass(frozen=True, slots=True)
class OpenedData:
    """The run's dataset folders, read once: each ``--data`` and ``--eval-data`` manifest by folder, and the
    vocabulary they share (the loaders, the model's size and the length check take them from here)."""

    manifests: dict[str, Manifest]
    vocab: Vocab
    lowercase: bool


def open_data(cfg: TrainConfig) -> OpenedData:
    """Every dataset manifest of the run and the datasets' vocabulary (all must share it)."""
    flag, training = cfg.data.named()
    manifests = {d: load_manifest(d) for d in dict.fromkeys([*training, *cfg.eval_set.folders])}
    hashes = {manifests[d].vocab_sha256 for d in training}
    if len(hashes) > 1:
        raise RunError(f"{flag} folders use different vocabularies: {sorted(h[:12] for h in hashes)}")
    root = training[0]
    m = manifests[root]
    try:
        vocab = load_dataset_vocab(m, lambda name: read_text(root, name), f"{root.rstrip('/')}/{m.vocab_file}")
    except VocabMismatchError as e:
        raise RunError(f"{flag} {e}") from None
    return OpenedData(manifests, vocab, m.lowercase)


@dataclass(frozen=True, slots=True)
class Weights:
    """Starting weights other than a checkpoint of the run (``--init-from``): the tensors, what to call them in
    an error, and what to say of them."""

    state: dict
    source: str
    notes: tuple[str, ...] = ()


def input_paths(cfg: TrainConfig) -> list[tuple[str, str | None]]:
    """``(flag, path)`` of every file and folder the run reads besides ``--data`` (None: not given), which an
    ``--overwrite`` of the run folder must not delete (:func:`bertstream.trainer.run_folder.check_overlap`)."""
    return [
        cfg.eval_set.input_path(),
        ("--init-from", cfg.model.init_from),
        ("--model-config", cfg.model.model_config),
    ]


def data_folders(cfg: TrainConfig) -> list[tuple[str, str]]:
    """``(flag, folder)`` of each ``--data`` folder, which the run folder must not hold
    (:func:`bertstream.trainer.run_folder.plan_run`)."""
    flag, folders = cfg.data.named()
    return [(flag, d) for d in folders]


def model_config(cfg: TrainConfig, vocab: Vocab, start: Start | None) -> tuple[BertConfig, Weights | None]:
    """(config, starting weights or None) from the checkpoint the run starts from, --init-from (the one owner of
    starting weights, :mod:`bertstream.trainer.weights`), --model-config or preset."""
    vocab_size = len(vocab)
    restored = start.restored if start is not None else None
    if restored is not None:  # the checkpoint's architecture; --dropout may still change for a second phase
        if start is not None and start.new_phase and cfg.model.init_from:
            raise RunError(
                f"--init-from {cfg.model.init_from} and {start.weights_given_as} both give the starting weights: "
                "pass one of them"
            )
        return cfg.model.trained(BertConfig.from_dict(restored.config["model"])), None
    if cfg.model.init_from:
        init = resolve_init(cfg.model.init_from, None, seed=cfg.run.seeds.init, flag="--init-from")
        cfg.model.refuse_other_architecture(init.config, options.given(cfg))  # the architecture is the model's own
        flag, folders = cfg.data.named()
        check_vocab(init, vocab.sha256, f"{flag} {folders[0]}", flag="--init-from", job="pretraining")
        source = f"--init-from {cfg.model.init_from}"
        _two_segments(init.config, source)
        weights = None if init.state is None else Weights(init.state, source, init.notes)
        return cfg.model.trained(init.config), weights
    config = cfg.model.new(vocab_size)
    if cfg.model.model_config:
        try:
            overrides = json_text.loads(read_whole(cfg.model.model_config, "--model-config"))
            if not isinstance(overrides, dict):
                raise TypeError(f"holds {type(overrides).__name__}, not an object of BertConfig fields")
            if overrides.get("vocab_size", vocab_size) != vocab_size:  # every argument is used or refused
                raise ValueError(
                    f"vocab_size {overrides['vocab_size']!r} is not the data's vocabulary ({vocab_size} tokens), "
                    "which sets it: drop vocab_size"
                )
            config = BertConfig.from_dict({**config.to_dict(), **overrides, "vocab_size": vocab_size})
        except WholeFileError as e:  # a FIFO, a device, a file past the cap: named by the reader
            raise RunError(str(e)) from None
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            raise RunError(f"--model-config {cfg.model.model_config}: {e}") from None
        _two_segments(config, f"--model-config {cfg.model.model_config}")
    return cfg.model.trained(config), None


def _two_segments(config: BertConfig, source: str) -> None:
    """Pretraining rows hold two segments (token types 0 and 1): a model of one token type indexed past its
    table at the first step (an IndexError traceback)."""
    if config.type_vocab_size < 2:
        raise RunError(
            f"{source}: type_vocab_size {config.type_vocab_size}, but pretraining rows hold two segments (token "
            "types 0 and 1, sentences A and B): give 2 or more"
        )


def input_notes(cfg: TrainConfig) -> list[str]:
    """What the inputs are read as, where it may not be what was meant: a ``DIR:N`` weight beside a folder of
    that name, an eval set that is the training set."""
    notes = cfg.data.notes()
    flag, folders = cfg.data.named()
    same = cfg.eval_set.also_training(folders, flag, "its figures measure the training set, not held-out data")
    return notes if same is None else [*notes, same]


def data_loader(cfg: TrainConfig, data: OpenedData, info: D.DistInfo) -> PretrainingLoader:
    """The training stream; opening it checks manifests, vocabulary and shard sizes (hashes with --skip-corrupt)."""
    try:
        loader = PretrainingLoader(
            replace(cfg.data, pin_memory=info.device.type == "cuda"),
            expected_vocab_sha256=data.vocab.sha256,
            world_size=info.world_size,
            rank=info.rank,
            opened=data.manifests,
            vocab=data.vocab,
        )
    except (TooFewSamples, ValueError) as e:  # ValueError: a weight too small for one sample per epoch
        raise RunError(cfg.data.unreadable(e)) from None
    unit, epoch = f"global batches of {loader.global_batch_size}", f"{cfg.data.flag} ({loader.num_samples} instances)"
    refusal = cfg.steps.epoch_refusal(loader.steps_per_epoch, unit, epoch, ", or add data")
    if refusal is not None:  # as a --batch-size past the data is refused: one step, no epoch
        raise RunError(refusal)
    return loader


def eval_data_loader(cfg: TrainConfig, data: OpenedData, info: D.DistInfo) -> PretrainingLoader | None:
    """The evaluation set, opened at start: a missing folder, another vocabulary or too few samples must not
    wait for the first evaluation (all steps since the last checkpoint would be lost). None without
    ``--eval-data``: the run evaluates nothing."""
    if not cfg.eval_set.folders:
        return None
    (folder,) = cfg.eval_set.folders
    config, note = cfg.data.evaluation(folder, data.manifests[folder].formats)
    if note:
        R.log(note, info)
    try:
        return PretrainingLoader(
            replace(config, pin_memory=info.device.type == "cuda"),  # as the training batches: copies overlap
            expected_vocab_sha256=data.vocab.sha256,
            world_size=info.world_size,
            rank=info.rank,
            opened=data.manifests,
        )
    except TooFewSamples as e:
        raise RunError(cfg.eval_set.unreadable(e)) from None
    except VocabMismatchError as e:
        raise RunError(cfg.eval_set.other_vocabulary(e)) from None


def check_model(config: BertConfig, cfg: TrainConfig, data: OpenedData, start: Start) -> None:
    """The model fits the data: its vocabulary (a resumed checkpoint's too) and its positions."""
    vocab, restored = data.vocab, start.restored
    if config.vocab_size != len(vocab):
        raise RunError(f"model vocab_size {config.vocab_size} != the {cfg.data.flag} vocabulary of {len(vocab)} tokens")
    if restored is not None and restored.config.get("vocab_sha256", vocab.sha256) != vocab.sha256:
        raise RunError(f"{restored.path} was trained on another vocabulary than {cfg.data.flag}")
    check_seq_length(config, cfg, data)


def mix_note(loader: PretrainingLoader) -> str:
    """The log line of a weighted ``--data`` mix: each folder's samples in an epoch."""
    return f"{loader.config.flag} mix, an epoch of {loader.epoch_samples} samples: {loader.mix_text()}"


# pretraining's other way out of data longer than the model's positions (fine-tuning's model is its --init's)
MORE_POSITIONS = ", or use --model-config with more max_position_embeddings"


def position_refusal(data: DataConfig, checkpoint: Path, why: ValueError) -> str:
    """Why ``checkpoint``'s data position cannot go on in this run's loader (``why``: the loader's words, e.g. other
    weights), and what to give instead (restore asks this when the data is the checkpoint's)."""
    return (
        f"{checkpoint}: its data position does not fit this run ({why}); resume with the run's "
        f"{data.flag}, weights and shuffle settings, or start a new phase with {new_phase('PATH')}"
    )


def new_data_note(data: DataConfig, checkpoint: str) -> str:
    """The log line of a resume whose data is not ``checkpoint``'s: its position is not carried over."""
    return f"new {data.flag} since {checkpoint}: the data position starts at the beginning"


def check_seq_length(config: BertConfig, cfg: TrainConfig, data: OpenedData) -> None:
    """Sequences longer than the model's positions crash at the first long batch: refuse them at start."""
    for flag, paths in (cfg.data.named(), cfg.eval_set.named()):
        for path in paths:
            length = data.manifests[path].shard_parameters.max_seq_length
            refusal = None if length is None else config.too_long(f"{flag} {path}", length, otherwise=MORE_POSITIONS)
            if refusal is not None:
                raise RunError(refusal)
