"""Reading a Hugging Face BERT folder (``BertForPreTraining``, ``BertModel``, a task class, RoBERTa-PreLayerNorm)
into our names: its config, its weights (safetensors or torch, whole or sharded), its vocabulary and, for a
task class, its head (``bertstream.trainer.hf.tasks``), which ``finetune --init`` may continue.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor

from bertstream.schemas import json_text
from bertstream.schemas.fields import local_member
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import Vocab, VocabError
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.trainer.checkpoint import CheckpointError, read_tensors, read_torch
from bertstream.trainer.hf import prelayernorm as PRE
from bertstream.trainer.hf import tasks as HT
from bertstream.trainer.hf.config import CONFIG_FILENAME, HFCheckpointError, config_from_hf, read_config
from bertstream.trainer.hf.convert import SAFETENSORS_FILENAME, TORCH_FILENAME, from_hf_state_dict
from bertstream.trainer.model_config import BertConfig

__all__ = ["HFLoadReport", "load_hf", "load_safetensors"]


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


def load_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return read_tensors(path)
    except CheckpointError as e:
        raise HFCheckpointError(str(e)) from None


def _read_weights(folder: Path) -> tuple[dict[str, Tensor], str]:
    if (folder / SAFETENSORS_FILENAME).is_file():
        return load_safetensors(folder / SAFETENSORS_FILENAME), str(folder / SAFETENSORS_FILENAME)
    if (folder / TORCH_FILENAME).is_file():
        return _torch_load(folder / TORCH_FILENAME), str(folder / TORCH_FILENAME)
    for index_name, reader in (
        (SAFETENSORS_FILENAME + ".index.json", load_safetensors),
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


def load_hf(
    hf_dir: str | Path, *, seed: int = 0, heads: Sequence[HT.HFHead] = ()
) -> tuple[BertConfig, dict[str, Tensor], HFLoadReport]:
    """Read a local HF BERT checkpoint (``BertForPreTraining``, ``BertModel``, ``BertForMaskedLM``,
    ``BertFor*Classification`` / QA / ...) into our names; missing heads are drawn from ``seed``. A task class
    that one of ``heads`` (the fine-tuning kinds') holds is reported with its head, for ``finetune --init``."""
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
    head = HT.read_head(hf_state, data, heads)
    if config.pre_ln:  # RoBERTa-PreLayerNorm's names and positions -> ours
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
