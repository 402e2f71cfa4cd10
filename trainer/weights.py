"""Starting weights, the one owner: ``finetune --init``, ``embed --init`` and ``pretrain --init-from`` name them
the same way, and each run checks its data's vocabulary against theirs with :func:`check_vocab`.

- our checkpoint folder (``RUN/checkpoints/step-N``: ``model.safetensors`` in HF names, ``config.json`` whose
  ``"model"`` is ``BertConfig.to_dict()``, ``vocab.txt``), or a run folder (its newest checkpoint);
- a Hugging Face BERT folder (``config.json`` with ``model_type: bert``), read by ``bertstream.trainer.hf.load.load_hf``;
- ``random:PRESET`` (``random:mini``, ``random:bert_tiny``, ...): a freshly initialised encoder of that preset
  over the task data's own vocabulary (the baseline of a pretrained-vs-random comparison);
- ``random:CHECKPOINT``: a freshly initialised encoder of that checkpoint's architecture (the baseline for a
  model whose shape is not a preset's, a pre-LN one for instance).

The tokenizer must be the checkpoint's: ``check_vocab`` compares the data's vocab sha256 with the init's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor

from bertstream.schemas.vocab import VOCAB_FILENAME, Vocab, VocabError, VocabMismatchError
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.errors import UserError
from bertstream.trainer.hf.config import read_config
from bertstream.trainer.hf.tasks import HFHead
from bertstream.trainer.model_config import PRESET_NAMES, BertConfig, find_preset
from bertstream.trainer.pooling import trained_with

RANDOM_PREFIX = "random:"


class InitError(UserError, ValueError):
    """``--init`` names nothing usable."""


@dataclass(frozen=True)
class TaskHead:
    """A fine-tuned model's head (our names: ``classifier.*`` or ``qa_outputs.*``) and what it was trained for;
    ``berttrain finetune`` continues it when its run is the same task (``finetune.heads.reuse_head``)."""

    kind: str
    labels: tuple[str, ...]
    pooling: str
    tensors: dict[str, Tensor] = field(repr=False)

    @property
    def trained_for(self) -> tuple[str, tuple[str, ...], str]:
        return self.kind, self.labels, self.pooling


@dataclass(frozen=True)
class Init:
    kind: str  # "checkpoint" | "hf" | "random"
    source: str
    config: BertConfig
    vocab: Vocab
    state: dict[str, Tensor] | None  # encoder tensors named bert.* (plus whatever else the file held); None: random
    notes: tuple[str, ...] = field(default_factory=tuple)
    head: TaskHead | None = None  # a fine-tuned model's task head, which finetune may continue

    def describe(self) -> dict:
        return {"kind": self.kind, "source": self.source, "vocab_sha256": self.vocab.sha256, "notes": list(self.notes)}


def resolve_init(
    spec: str, data_vocab: Vocab | None, *, flag: str, seed: int = 0, heads: Sequence[HFHead] = ()
) -> Init:
    """The encoder config, weights and vocabulary that ``spec`` names (see the module docstring).

    ``flag``: the caller's flag for the weights (``--init``, ``--init-from``), which every message names: the
    weights serve three commands, so none is presumed. ``data_vocab`` None: no task data to borrow a vocabulary
    from, so ``random:PRESET`` is refused. ``heads``:
    the HF task classes whose head a Hugging Face folder's may be (fine-tuning's kinds), kept as ``Init.head``."""
    if spec.startswith(RANDOM_PREFIX):
        if data_vocab is None:
            raise InitError(
                f"{flag} {spec}: random:PRESET needs task data's vocabulary; give a checkpoint or "
                "a Hugging Face BERT folder"
            )
        name = spec[len(RANDOM_PREFIX) :]
        preset = find_preset(name)
        if preset is None and name and Path(name).is_dir():  # "random:" is no folder (not the current one)
            return _random_like(spec, Path(name), data_vocab, flag)
        if preset is None:
            choices = ", ".join(PRESET_NAMES)
            raise InitError(
                f"{flag} {spec}: unknown preset {name!r}; use random:PRESET with PRESET one of {choices}, "
                "or random:CHECKPOINT"
            )
        return Init(
            "random",
            spec,
            preset(len(data_vocab)),
            data_vocab,
            None,
            (f"random {name} encoder over the task data's vocabulary ({len(data_vocab)} tokens)",),
        )
    init = _folder_init(spec, seed, weights=True, flag=flag, heads=heads)
    if init.state is not None:
        check_weights(init.state, init.config, f"{flag} {init.source}")
    return init


def check_weights(state: dict[str, Tensor], config: BertConfig, source: str) -> None:
    """What is read is what is meant: the weights are floating point (int8 or bool tensors were cast, a first
    loss of thousands) and of the shapes their config.json gives (a config that disagrees with its weights was
    a traceback from ``load_state_dict``). Shapes come from the model built on the meta device: no memory."""
    import torch

    from bertstream.trainer.model import BertForPreTraining

    odd = sorted(k for k, v in state.items() if not v.is_floating_point())
    if odd:
        raise InitError(
            f"{source}: {len(odd)} weight(s) are not floating point ({odd[0]} is {state[odd[0]].dtype}): not a "
            "model's weights, or a quantised one that training cannot start from"
        )
    with torch.device("meta"):
        expected = BertForPreTraining(config).state_dict()
    for key, value in state.items():
        if key in expected and tuple(value.shape) != tuple(expected[key].shape):
            raise InitError(
                f"{source}: {key} has shape {tuple(value.shape)}, its config.json makes it "
                f"{tuple(expected[key].shape)}: the config and the weights disagree"
            )


def _folder_init(spec: str, seed: int, *, weights: bool, flag: str, heads: Sequence[HFHead] = ()) -> Init:
    """Our checkpoint (or run folder) or a Hugging Face folder; ``weights=False``: our checkpoint's tensors
    are not read (``random:CHECKPOINT`` needs only its architecture and vocabulary)."""
    folder = Path(spec)
    if not folder.is_dir():
        raise InitError(f"{flag} {spec}: not a folder (nor random:PRESET)")
    try:
        folder = ckpt.newest_in(folder)  # a run folder: its newest checkpoint
    except ckpt.CheckpointError as e:
        raise InitError(f"{flag} {e}") from None
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InitError(f"{flag} {folder}: has no config.json (neither our checkpoint nor a Hugging Face folder)")
    data = read_config(config_path, InitError)
    if isinstance(data.get("model"), dict):
        return _our_checkpoint(folder, data, weights=weights, flag=flag)
    return _hf_folder(folder, seed, flag, heads)


def _random_like(spec: str, path: Path, data_vocab: Vocab, flag: str) -> Init:
    """``random:CHECKPOINT``: that checkpoint's architecture (pre-LN included), freshly initialised, over the
    task data's vocabulary: the baseline with exactly the pretrained model's shape."""
    like = _folder_init(str(path), 0, weights=False, flag=flag)
    if len(like.vocab) != len(data_vocab):
        raise InitError(
            f"{flag} {spec}: the checkpoint's vocabulary has {len(like.vocab)} tokens, the data's {len(data_vocab)}"
        )
    return Init(
        "random",
        spec,
        like.config,
        data_vocab,
        None,
        (f"random encoder of {like.source}'s architecture over the task data's vocabulary ({len(data_vocab)} tokens)",),
    )


def _our_checkpoint(folder: Path, data: dict, *, weights: bool, flag: str) -> Init:
    try:
        config = BertConfig.from_dict(data["model"])
    except (TypeError, ValueError) as e:
        raise InitError(f"{folder}/config.json: {e}") from None
    try:
        vocab = Vocab.load(folder / VOCAB_FILENAME)
    except VocabError as e:
        raise InitError(f"{flag} {folder}: {e}") from None
    if not weights:
        return Init("checkpoint", str(folder), config, vocab, None, ("architecture only",))
    model_file = folder / ckpt.MODEL_FILE
    if not model_file.is_file():
        raise InitError(f"{flag} {folder}: checkpoint lacks {ckpt.MODEL_FILE}")
    try:
        state = ckpt.read_tensors(model_file)
    except ckpt.CheckpointError as e:
        raise InitError(f"{flag} {e}") from None
    task, run = data.get("task"), data.get("finetune")
    head = None
    if isinstance(task, dict) and isinstance(run, dict):  # a fine-tuning checkpoint: its head may be continued
        tensors = {k: v for k, v in state.items() if not k.startswith("bert.")}
        labels = tuple(map(str, task.get("labels") or ()))
        head = TaskHead(str(task.get("kind")), labels, trained_with(run), tensors)
    return Init("checkpoint", str(folder), config, vocab, state, (f"encoder weights from {model_file}",), head)


def _hf_folder(folder: Path, seed: int, flag: str, heads: Sequence[HFHead]) -> Init:
    from bertstream.trainer.hf.load import load_hf

    config, state, report = load_hf(folder, seed=seed, heads=heads)
    try:
        vocab = Vocab.load(folder)
    except VocabError as e:
        raise InitError(
            f"{flag} {folder}: the Hugging Face folder has no usable vocab.txt ({e}); without it the "
            "data's token ids cannot be checked against the model's"
        ) from None
    head = TaskHead(*report.head, dict(report.head_state)) if report.head is not None else None
    return Init("hf", str(folder), config, vocab, state, tuple(report.lines()), head)


def check_vocab(init: Init, data_sha256: str, data_root: str, *, flag: str, job: str = "task") -> None:
    """Refuse data (``data_root``, made by ``bertprep JOB``) tokenised with another vocabulary than the init's,
    compared by content: the same size is not the same tokens. ``flag`` names the init in the message."""
    if init.vocab.sha256 != data_sha256:
        hint = (
            f"re-run `bertprep {job} ... --vocab {Path(init.source) / VOCAB_FILENAME}`"
            if init.kind != "random"
            else "use the same vocab.txt for every split"
        )
        raise VocabMismatchError(
            f"vocabulary mismatch: the data {data_root} was tokenised with vocab sha256 {data_sha256}, "
            f"but {flag} {init.source} has vocab sha256 {init.vocab.sha256}; {hint} so that the ids mean the "
            "model's tokens"
        )
    if len(init.vocab) > init.config.vocab_size:
        raise VocabMismatchError(
            f"{flag} {init.source}: vocabulary of {len(init.vocab)} tokens but only {init.config.vocab_size} embeddings"
        )
