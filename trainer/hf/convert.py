"""Hugging Face interop: export our BERT as a ``transformers`` checkpoint, and load HF BERT checkpoints.

Post-LN: key mapping (ours -> HF ``BertForPreTraining``) is the identity. ``cls.predictions.decoder.{weight,bias}``
(HF's tied aliases of ``bert.embeddings.word_embeddings.weight`` and ``cls.predictions.bias``) are not
written, exactly as ``save_pretrained`` does not write them. Pre-LN: ``RobertaPreLayerNormForMaskedLM``, which
computes the same function (:mod:`bertstream.trainer.hf.prelayernorm` maps the names and positions).

This module does not import ``transformers``: it writes and reads the files themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bertstream.cli.errors import UsageError
from bertstream.cli.owned import check_owned, publish
from bertstream.schemas import json_text
from bertstream.schemas.fields import local_member
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import VOCAB_FILENAME, Vocab, VocabError
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.schemas.wordpiece import bert_tokenizer, with_bert_template
from bertstream.trainer.checkpoint import CheckpointError, read_tensors, read_torch, write_tensors
from bertstream.trainer.hf import prelayernorm as PRE
from bertstream.trainer.hf import tasks as HT
from bertstream.trainer.hf.config import CONFIG_FILENAME, HFCheckpointError, config_from_hf, hf_config_dict, read_config
from bertstream.trainer.model import BertForPreTraining, BertPooler, BertPreTrainingHeads, seeded_init
from bertstream.trainer.model_config import BertConfig

__all__ = [
    "HFCheckpointError",
    "HFLoadReport",
    "export_checkpoint",
    "export_hf",
    "from_hf_state_dict",
    "load_hf",
    "to_hf_state_dict",
]

SAFETENSORS_FILENAME = "model.safetensors"
TORCH_FILENAME = "pytorch_model.bin"
TOKENIZER_CONFIG_FILENAME = "tokenizer_config.json"
TOKENIZER_FILENAME = "tokenizer.json"
# What export-hf writes: the only names a folder it replaces may hold.
EXPORT_FILES = frozenset(
    (CONFIG_FILENAME, SAFETENSORS_FILENAME, VOCAB_FILENAME, TOKENIZER_CONFIG_FILENAME, TOKENIZER_FILENAME)
)

# Parameters a checkpoint of an encoder-only model (BertModel, classification, QA, ...) may lack: they are
# initialised fresh and reported. Anything else missing is an error.
_HEAD_PREFIXES = ("cls.", "bert.pooler.")
# Non-parameter buffers older HF versions saved; they carry no information.
_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")


@dataclass(frozen=True)
class HFLoadReport:
    """What ``load_hf`` did with a checkpoint, for the CLI to print."""

    source: str
    architectures: tuple[str, ...]
    loaded: int
    fresh: tuple[str, ...] = ()
    ignored: tuple[tuple[str, str], ...] = ()  # (checkpoint key, reason)
    notes: tuple[str, ...] = ()
    vocab_sha256: str | None = None
    head: HT.TaskHead | None = None  # a task class's folder: what its head was trained for
    head_state: Mapping[str, Tensor] = field(default_factory=dict, repr=False)  # that head in our names

    def lines(self) -> list[str]:
        out = [
            f"loaded {self.loaded} tensors from {self.source}"
            + (f" ({', '.join(self.architectures)})" if self.architectures else "")
        ]
        if self.fresh:
            out.append(f"initialised fresh ({len(self.fresh)}): {', '.join(self.fresh)}")
        if self.ignored:
            out.append(f"ignored ({len(self.ignored)}):")
            out.extend(f"  {key}: {reason}" for key, reason in self.ignored)
        out.extend(self.notes)
        if self.vocab_sha256:
            out.append(f"vocab sha256 {self.vocab_sha256}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


# ------------------------------------------------------------------------------------------ state dicts


def _expected_shapes(config: BertConfig) -> dict[str, torch.Size]:
    with torch.device("meta"):
        model = BertForPreTraining(config)
    return {k: v.shape for k, v in model.state_dict().items()}


def to_hf_state_dict(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Our key names -> HF ``BertForPreTraining`` key names: the same names."""
    return dict(state)


def _normalise_hf_key(key: str) -> str:
    # BertModel checkpoints have no "bert." prefix; TF-converted ones call LayerNorm parameters gamma/beta.
    if key.startswith(("embeddings.", "encoder.", "pooler.")):
        key = "bert." + key
    if key.endswith(".gamma"):
        key = key[: -len(".gamma")] + ".weight"
    elif key.endswith(".beta"):
        key = key[: -len(".beta")] + ".bias"
    return key


def from_hf_state_dict(
    hf_state: Mapping[str, Tensor],
    config: BertConfig,
    *,
    seed: int = 0,
    tie_word_embeddings: bool = True,
    source: str = "checkpoint",
) -> tuple[dict[str, Tensor], list[str], list[tuple[str, str]]]:
    """HF BERT tensors -> ``(our complete state dict, fresh keys, ignored (key, reason))``.

    Encoder weights must all be present; missing pooler/MLM/NSP weights are drawn fresh from ``seed``.
    """
    expected = _expected_shapes(config)
    ours: dict[str, Tensor] = {}
    ignored: list[tuple[str, str]] = []
    normalised: dict[str, tuple[str, Tensor]] = {}
    for raw_key, value in hf_state.items():
        key = _normalise_hf_key(raw_key)
        if key in normalised:
            raise HFCheckpointError(f"{source}: keys {normalised[key][0]!r} and {raw_key!r} name the same tensor")
        normalised[key] = (raw_key, value)

    for key, (raw_key, value) in normalised.items():
        if key in expected:
            ours[key] = value
        elif key in _BUFFERS:
            ignored.append((raw_key, "buffer, recomputed"))
        elif key == "cls.predictions.decoder.weight":
            word = normalised.get("bert.embeddings.word_embeddings.weight")
            if word is not None and word[1].shape == value.shape and not torch.equal(word[1], value):
                if not tie_word_embeddings:
                    raise HFCheckpointError(
                        f"{source}: {raw_key} differs from the word embeddings and tie_word_embeddings is false; "
                        "this model always ties the MLM decoder to the word embeddings"
                    )
                reason = "tied to bert.embeddings.word_embeddings.weight (values differed; HF ties them too)"
                ignored.append((raw_key, reason))
            else:
                ignored.append((raw_key, "tied to bert.embeddings.word_embeddings.weight"))
        elif key == "cls.predictions.decoder.bias":
            if "cls.predictions.bias" in normalised:
                ignored.append((raw_key, "tied to cls.predictions.bias"))
            else:
                ours["cls.predictions.bias"] = value
        elif key.startswith("bert."):
            raise HFCheckpointError(
                f"{source}: encoder key {raw_key!r} has no counterpart in this BERT "
                f"(num_layers={config.num_layers}); the checkpoint is a different architecture"
            )
        else:
            ignored.append((raw_key, "not part of BertForPreTraining (another task's head)"))

    for key, value in ours.items():
        if value.shape != expected[key]:
            raise HFCheckpointError(
                f"{source}: {key} has shape {tuple(value.shape)}, expected {tuple(expected[key])} for this config"
            )

    missing = [k for k in expected if k not in ours]
    encoder_missing = [k for k in missing if not k.startswith(_HEAD_PREFIXES)]
    if encoder_missing:
        raise HFCheckpointError(f"{source}: lacks encoder weight(s) {encoder_missing}")
    if missing:
        # Same streams as BertForPreTraining(config, seed=seed), without building a whole model.
        with torch.device("meta"):  # skip torch's default init: it would draw from the global RNG
            fresh_parts: dict[str, nn.Module] = {"bert.pooler": BertPooler(config), "cls": BertPreTrainingHeads(config)}
        fresh_state: dict[str, Tensor] = {}
        for stream, module in fresh_parts.items():
            module.to_empty(device="cpu")
            seeded_init(module, config.initializer_range, seed, stream)
            fresh_state.update({f"{stream}.{k}": v for k, v in module.state_dict().items()})
        for k in missing:
            ours[k] = fresh_state[k]
    return {k: ours[k] for k in expected}, missing, ignored


# ------------------------------------------------------------------------------------------------ load


def _load_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return read_tensors(path)
    except CheckpointError as e:
        raise HFCheckpointError(str(e)) from None


def _read_weights(folder: Path) -> tuple[dict[str, Tensor], str]:
    if (folder / SAFETENSORS_FILENAME).is_file():
        return _load_safetensors(folder / SAFETENSORS_FILENAME), str(folder / SAFETENSORS_FILENAME)
    if (folder / TORCH_FILENAME).is_file():
        return _torch_load(folder / TORCH_FILENAME), str(folder / TORCH_FILENAME)
    for index_name, reader in (
        (SAFETENSORS_FILENAME + ".index.json", _load_safetensors),
        (TORCH_FILENAME + ".index.json", _torch_load),
    ):
        index = folder / index_name
        if index.is_file():
            try:
                weight_map = json_text.loads(read_whole(index, "shard index"))["weight_map"]
            except WholeFileError as e:
                raise HFCheckpointError(str(e)) from None
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise HFCheckpointError(f"{index}: malformed shard index ({e})") from None
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise HFCheckpointError(f"{index}: malformed shard index (weight_map is no object of file names)")
            state: dict[str, Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                try:  # the index is untrusted: a file it names stays inside the folder
                    path = local_member(str(folder), shard, f"{index} weight_map")
                except SchemaError as e:
                    raise HFCheckpointError(str(e)) from None
                state.update(reader(Path(path)))
            return state, str(index)
    raise HFCheckpointError(
        f"{folder}: holds neither {SAFETENSORS_FILENAME} nor {TORCH_FILENAME} (nor a sharded index of them)"
    )


def _torch_load(path: Path) -> dict[str, Tensor]:
    state = read_torch(path, HFCheckpointError)
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise HFCheckpointError(f"{path}: not a state dict of tensors")
    return state


def load_hf(hf_dir: str | Path, *, seed: int = 0) -> tuple[BertConfig, dict[str, Tensor], HFLoadReport]:
    """Read a local HF BERT checkpoint (``BertForPreTraining``, ``BertModel``, ``BertForMaskedLM``,
    ``BertFor*Classification`` / QA / ...) into our names; missing heads are drawn from ``seed``."""
    folder = Path(hf_dir)
    if not folder.is_dir():
        raise HFCheckpointError(f"{folder}: checkpoint folder does not exist")
    config_path = folder / CONFIG_FILENAME
    if not config_path.is_file():
        raise HFCheckpointError(f"{folder}: has no {CONFIG_FILENAME}")
    data = read_config(config_path)
    config = config_from_hf(data, str(config_path))
    hf_state, source = _read_weights(folder)
    aliases: list[str] = []
    architectures = tuple(data.get("architectures") or ())
    head = HT.read_head(hf_state, data)
    if config.norm_placement == "pre":  # RoBERTa-PreLayerNorm's names and positions -> ours
        hf_state, aliases = PRE.from_roberta(HT.pooler_back(hf_state, architectures), config)
    state, fresh, ignored = from_hf_state_dict(
        hf_state,
        config,
        seed=seed,
        tie_word_embeddings=data.get("tie_word_embeddings", True) is not False,
        source=source,
    )
    ignored += [(key, "tied alias, buffer or another head: not part of this model") for key in aliases]
    notes: list[str] = []
    if data.get("model_type") is None:
        notes.append(f"{config_path} has no model_type; read as BERT")
    if head is not None:  # kept beside the encoder: finetune --init reuses it for the same task and labels
        notes.append(f"task head of {architectures[0]}: {head[0][0]}, labels {list(head[0][1])}")
    vocab_sha = None
    try:
        vocab = Vocab.load(folder)
    except VocabError as e:
        notes.append(f"no usable vocabulary: {e}")
    else:
        vocab_sha = vocab.sha256
        if len(vocab) > config.vocab_size:
            notes.append(f"vocabulary has {len(vocab)} tokens but the model only {config.vocab_size} embeddings")
    report = HFLoadReport(
        source=source,
        architectures=architectures,
        loaded=len(state) - len(fresh),
        fresh=tuple(fresh),
        ignored=tuple(ignored),
        notes=tuple(notes),
        vocab_sha256=vocab_sha,
        head=head[0] if head is not None else None,
        head_state=head[1] if head is not None else {},
    )
    return config, state, report


# ---------------------------------------------------------------------------------------------- export


def export_hf(
    model_or_state: nn.Module | Mapping[str, Tensor],
    config: BertConfig,
    vocab_tokens: Vocab | Sequence[str],
    out_dir: str | Path,
    *,
    task: str | None = None,
    labels: Sequence[str] = (),
    label_names: Sequence[str] = (),
    do_lower_case: bool | None = None,
    dtype: torch.dtype = torch.float32,
    overwrite: bool = False,
) -> Path:
    """Write ``config.json``, ``model.safetensors``, ``vocab.txt``, ``tokenizer_config.json`` and ``tokenizer.json`` so that
    ``transformers.BertForPreTraining.from_pretrained(out_dir)`` loads with no missing or unexpected keys.

    ``task`` (a task kind): the state is a fine-tuned model's (``bert.*`` and its head), written as the
    ``transformers`` task class of that kind (:mod:`bertstream.trainer.hf.tasks`), with ``id2label``/``label2id``
    from ``labels``. ``vocab_tokens`` may be shorter than ``config.vocab_size`` (a vocabulary padded to a multiple
    of 8/64 for speed), never longer. ``do_lower_case`` is written to ``tokenizer_config.json`` only when given.
    ``out_dir`` is new or empty, or holds an earlier export that ``overwrite`` replaces; the files appear there
    only once all are written (``bertstream.cli.owned``).
    """
    if config.norm_placement not in ("post", "pre"):
        raise HFCheckpointError(
            f"norm_placement={config.norm_placement!r}: no transformers class holds it (post: BertForPreTraining, "
            "pre: RobertaPreLayerNormForMaskedLM); fine-tune it with berttrain finetune --init CHECKPOINT instead"
        )
    state = model_or_state.state_dict() if isinstance(model_or_state, nn.Module) else dict(model_or_state)
    if task is None:
        expected = _expected_shapes(config)
        unexpected = sorted(set(state) - set(expected))
        what = "BertForPreTraining"
    else:
        expected = {k: v for k, v in _expected_shapes(config).items() if k.startswith("bert.")}
        expected |= HT.head_shapes(task, config, labels)
        unexpected, what = [], HT.architecture(task, config)  # (task_state_dict names any tensor of no head)
    missing = sorted(set(expected) - set(state))
    if missing or unexpected:
        raise HFCheckpointError(f"state dict does not match {what}: missing {missing}, unexpected {unexpected}")
    for key, shape in expected.items():
        if state[key].shape != shape:
            raise HFCheckpointError(f"{key} has shape {tuple(state[key].shape)}, expected {tuple(shape)}")
    vocab = vocab_tokens if isinstance(vocab_tokens, Vocab) else Vocab(tuple(vocab_tokens))
    if len(vocab) > config.vocab_size:
        raise HFCheckpointError(f"vocabulary has {len(vocab)} tokens but vocab_size is {config.vocab_size}")

    dtype_name = str(dtype).removeprefix("torch.")
    if task is not None:
        named, hf_config = (
            HT.task_state_dict(state, config, task),
            HT.task_config_dict(config, task, labels, dtype=dtype_name, names=label_names),
        )
    else:
        named = PRE.to_roberta(state, config) if config.norm_placement == "pre" else to_hf_state_dict(state)
        hf_config = hf_config_dict(config, dtype=dtype_name)
    # clone: safetensors refuses tensors that share storage
    hf_state = {k: v.detach().to("cpu", dtype).clone().contiguous() for k, v in named.items()}
    out = Path(out_dir)
    try:  # a folder of other files (a dataset, a user's model) is never written into; an earlier export only so
        check_owned(out, EXPORT_FILES.__contains__, overwrite=overwrite, what="a Hugging Face export", param="out")
    except UsageError as e:
        raise HFCheckpointError(e.message) from None
    try:
        publish(out, lambda tmp: _write_export(tmp, hf_state, hf_config, config, vocab, do_lower_case))
    except OSError as e:  # a full disk, a quota: written in a temporary folder, which publish has removed
        why = e.strerror or str(e)
        raise HFCheckpointError(
            f"cannot write the export to {out}: {why}; nothing of it was kept, {out} is as it was"
        ) from None
    return out


def _write_export(
    out: Path,
    hf_state: dict[str, Tensor],
    hf_config: dict[str, Any],
    config: BertConfig,
    vocab: Vocab,
    do_lower_case: bool | None,
) -> None:
    write_tensors(out / SAFETENSORS_FILENAME, hf_state, {"format": "pt"})
    (out / CONFIG_FILENAME).write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    vocab.write(out / VOCAB_FILENAME)
    tokenizer_config: dict[str, Any] = {
        "tokenizer_class": "BertTokenizer",
        "model_max_length": config.max_position_embeddings,
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }
    if do_lower_case is not None:
        tokenizer_config["do_lower_case"] = do_lower_case
    (out / TOKENIZER_CONFIG_FILENAME).write_text(
        json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    # The fast tokenizer AutoTokenizer would otherwise convert from vocab.txt at every load (BertTokenizerFast's
    # default lower-casing when the checkpoint does not say): the folder loads as it is, in transformers or in
    # tokenizers alone.
    lower = True if do_lower_case is None else do_lower_case
    with_bert_template(bert_tokenizer(vocab, lower), vocab).save(str(out / TOKENIZER_FILENAME))


def export_checkpoint(
    ckpt_dir: str | Path, out_dir: str | Path, *, do_lower_case: bool | None = None, overwrite: bool = False
) -> Path:
    """Export a trainer checkpoint folder (``model.safetensors`` in our names, ``config.json`` whose ``"model"``
    key holds ``BertConfig.to_dict()``, ``vocab.txt``) as an HF folder; a run folder stands for its newest
    checkpoint, as for ``finetune --init`` and ``embed --init``. ``do_lower_case`` defaults to a top-level
    ``"do_lower_case"`` (or a pretraining run's ``"lowercase"``) entry of the checkpoint's ``config.json``."""
    from bertstream.trainer.checkpoint import CheckpointError, newest_in

    if not str(out_dir):  # Path("") is the current folder: "output overlaps inputs:  and ..." before
        raise HFCheckpointError(f"OUT is empty ({str(out_dir)!r}): name the folder to write the export into")
    try:
        folder = newest_in(Path(ckpt_dir))
    except CheckpointError as e:
        raise HFCheckpointError(str(e)) from None
    if not folder.is_dir():
        raise HFCheckpointError(f"{folder}: checkpoint folder does not exist")
    out = Path(out_dir).resolve()
    if out.is_relative_to(folder.resolve()) or folder.resolve().is_relative_to(out):
        raise HFCheckpointError(f"output overlaps inputs: {out_dir} and the checkpoint {folder} share a folder")
    for name in (CONFIG_FILENAME, SAFETENSORS_FILENAME, VOCAB_FILENAME):
        if not (folder / name).is_file():
            raise HFCheckpointError(f"{folder}: checkpoint lacks {name}")
    data = read_config(folder / CONFIG_FILENAME)
    if not isinstance(data.get("model"), dict):
        raise HFCheckpointError(f"{folder / CONFIG_FILENAME}: has no 'model' object holding the BertConfig")
    try:
        config = BertConfig.from_dict(data["model"])
    except (TypeError, ValueError) as e:
        raise HFCheckpointError(f"{folder / CONFIG_FILENAME}: {e}") from None
    if do_lower_case is None:  # a pretraining run's config.json says "lowercase" (its shards' vocabulary casing)
        given = data.get("do_lower_case", data.get("lowercase"))
        do_lower_case = given if isinstance(given, bool) else None
    state = _load_safetensors(folder / SAFETENSORS_FILENAME)
    try:
        vocab = Vocab.load(folder / VOCAB_FILENAME)
    except VocabError as e:
        raise HFCheckpointError(str(e)) from None
    if isinstance(data.get("finetune"), dict):  # trainer.finetune.loop's run config: a task model
        task: dict[str, Any] = data["task"] if isinstance(data.get("task"), dict) else {}
        HT.check_pooling(str(data["finetune"].get("pooling", "cls")), str(folder))
        labels, names = HT.run_labels(task, folder / CONFIG_FILENAME)
        return export_hf(
            state, config, vocab, out_dir, task=str(task.get("kind")), labels=labels, label_names=names,
            do_lower_case=do_lower_case, overwrite=overwrite,
        )  # fmt: skip
    return export_hf(state, config, vocab, out_dir, do_lower_case=do_lower_case, overwrite=overwrite)
