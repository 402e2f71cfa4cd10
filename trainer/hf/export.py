"""Writing a Hugging Face folder: our BERT as ``BertForPreTraining`` (post-LN) or ``RobertaPreLayerNormForMaskedLM``
(pre-LN), a fine-tuned model as its kind's task class (``bertstream.trainer.hf.tasks``), with its vocabulary and
tokenizer files; ``berttrain export-hf`` exports a checkpoint or run folder with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bertstream.cli.errors import UsageError
from bertstream.cli.owned import check_owned, publish
from bertstream.schemas.vocab import VOCAB_FILENAME, Vocab, VocabError
from bertstream.schemas.wordpiece import bert_tokenizer, with_bert_template
from bertstream.trainer.checkpoint import write_tensors
from bertstream.trainer.hf import prelayernorm as PRE
from bertstream.trainer.hf import tasks as HT
from bertstream.trainer.hf.config import CONFIG_FILENAME, HFCheckpointError, hf_config_dict, read_config
from bertstream.trainer.hf.convert import SAFETENSORS_FILENAME, expected_shapes, to_hf_state_dict
from bertstream.trainer.hf.load import load_safetensors
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.pooling import export_refusal

__all__ = ["EXPORT_FILES", "check_exportable", "export_checkpoint", "export_hf"]

TOKENIZER_CONFIG_FILENAME = "tokenizer_config.json"
TOKENIZER_FILENAME = "tokenizer.json"
# What export-hf writes: the only names a folder it replaces may hold.
EXPORT_FILES = frozenset(
    (CONFIG_FILENAME, SAFETENSORS_FILENAME, VOCAB_FILENAME, TOKENIZER_CONFIG_FILENAME, TOKENIZER_FILENAME)
)


def export_hf(
    model_or_state: nn.Module | Mapping[str, Tensor],
    config: BertConfig,
    vocab_tokens: Vocab | Sequence[str],
    out_dir: str | Path,
    *,
    task: HT.HFHead | None = None,
    labels: Sequence[str] = (),
    label_names: Sequence[str] = (),
    do_lower_case: bool | None = None,
    dtype: torch.dtype = torch.float32,
    overwrite: bool = False,
) -> Path:
    """Write ``config.json``, ``model.safetensors``, ``vocab.txt``, ``tokenizer_config.json`` and ``tokenizer.json`` so that
    ``transformers.BertForPreTraining.from_pretrained(out_dir)`` loads with no missing or unexpected keys.

    ``task`` (a task kind's ``HFHead``: its fine-tuning ``Task``'s ``hf``): the state is a fine-tuned model's
    (``bert.*`` and its head), written as the ``transformers`` task class of that kind, with ``id2label``/``label2id``
    from ``labels``. ``vocab_tokens`` may be shorter than ``config.vocab_size`` (a vocabulary padded to a multiple
    of 8/64 for speed), never longer. ``do_lower_case`` is written to ``tokenizer_config.json`` only when given.
    ``out_dir`` is new or empty, or holds an earlier export that ``overwrite`` replaces; the files appear there
    only once all are written (``bertstream.cli.owned``).
    """
    check_exportable(config)
    state = model_or_state.state_dict() if isinstance(model_or_state, nn.Module) else dict(model_or_state)
    if task is None:
        expected = expected_shapes(config)
        unexpected = sorted(set(state) - set(expected))
        what = "BertForPreTraining"
    else:
        expected = {k: v for k, v in expected_shapes(config).items() if k.startswith("bert.")}
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
        named = PRE.to_roberta(state, config) if config.pre_ln else to_hf_state_dict(state)
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


def check_exportable(config: BertConfig) -> None:
    """Refuse, in one line, an architecture no ``transformers`` class computes: exported, it would load without
    an error and compute another function."""
    if config.norm_placement not in ("post", "pre"):
        raise HFCheckpointError(
            f"norm_placement={config.norm_placement!r}: no transformers class holds it (post: BertForPreTraining, "
            "pre: RobertaPreLayerNormForMaskedLM); fine-tune it with berttrain finetune --init CHECKPOINT instead"
        )
    if config.position_embedding_type != "absolute":
        # transformers' BertConfig.position_embedding_type knows "absolute" and "relative_key(_query)" only: a
        # folder would load with fresh position embeddings and no rotation, silently another model
        raise HFCheckpointError(
            f"position_embedding_type={config.position_embedding_type!r}: no transformers BERT class holds rotary "
            "position embeddings; the checkpoint serves berttrain finetune --init and berttrain embed --init instead"
        )


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
    ckpt_dir: str | Path,
    out_dir: str | Path,
    *,
    heads: Sequence[HT.HFHead] = (),
    do_lower_case: bool | None = None,
    overwrite: bool = False,
) -> Path:
    """Export a trainer checkpoint folder (``model.safetensors`` in our names, ``config.json`` whose ``"model"``
    key holds ``BertConfig.to_dict()``, ``vocab.txt``) as an HF folder; a run folder stands for its newest
    checkpoint, as for ``finetune --init`` and ``embed --init``; a fine-tuned model is written as the class of its
    kind's head among ``heads`` (each fine-tuning ``Task``'s ``hf``). ``do_lower_case`` defaults to a top-level
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
    check_exportable(config)  # before the weights are read
    if do_lower_case is None:  # a pretraining run's config.json says "lowercase" (its shards' vocabulary casing)
        given = data.get("do_lower_case", data.get("lowercase"))
        do_lower_case = given if isinstance(given, bool) else None
    state = load_safetensors(folder / SAFETENSORS_FILENAME)
    try:
        vocab = Vocab.load(folder / VOCAB_FILENAME)
    except VocabError as e:
        raise HFCheckpointError(str(e)) from None
    if isinstance(data.get("finetune"), dict):  # trainer.finetune.loop's run config: a task model
        task: dict[str, Any] = data["task"] if isinstance(data.get("task"), dict) else {}
        refusal = export_refusal(data["finetune"], str(folder))  # a mean-pooled head: no HF class pools so
        if refusal is not None:
            raise HFCheckpointError(refusal)
        labels, names = HT.run_labels(task, folder / CONFIG_FILENAME)
        head = HT.find_head(heads, str(task.get("kind")))
        return export_hf(
            state, config, vocab, out_dir, task=head, labels=labels, label_names=names,
            do_lower_case=do_lower_case, overwrite=overwrite,
        )  # fmt: skip
    return export_hf(state, config, vocab, out_dir, do_lower_case=do_lower_case, overwrite=overwrite)
