"""Small transformers BERT task models saved as Hugging Face folders, for the head and --init tests."""

from __future__ import annotations

from pathlib import Path

import torch

from bertstream.schemas import tasks as T
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab
from bertstream.trainer.finetune.tasks import TASKS
from bertstream.trainer.hf.config import hf_config_dict
from bertstream.trainer.model import BertConfig

CONFIG = BertConfig(
    vocab_size=120, hidden_size=48, num_layers=2, num_heads=4, intermediate_size=80, max_position_embeddings=40
)
VOCAB = Vocab((*SPECIAL_TOKENS, *(f"tok{i}" for i in range(CONFIG.vocab_size - len(SPECIAL_TOKENS)))))
TOL = {"rtol": 0.0, "atol": 1e-5}
HF_CLASSES = {kind: "Bert" + task.hf.suffix for kind, task in TASKS.items()}  # each kind's transformers class


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Perturb every parameter (biases, LayerNorms included) so a mis-mapped tensor cannot go unnoticed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, CONFIG.vocab_size, (3, 16), generator=g)
    ids[:, 0] = 2
    types = torch.zeros_like(ids)
    types[:, 7:] = 1
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 5:] = 0
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def save_hf(kind: str, folder: Path, seed: int) -> torch.nn.Module:
    import transformers

    torch.manual_seed(seed)  # transformers draws its init from the global RNG
    hf_config = transformers.BertConfig(**hf_config_dict(CONFIG), num_labels=2 if kind == T.SQUAD else 3)
    hf = randomise(getattr(transformers, HF_CLASSES[kind])(hf_config), seed)
    hf.save_pretrained(folder)
    VOCAB.write(folder / "vocab.txt")
    return hf
