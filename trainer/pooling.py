"""``--pooling``, declared once: how one vector is read from the encoder's states of a row. ``embed`` offers cls,
mean and none (every token's vector); fine-tuning's sentence heads cls and mean. Each command holds
:class:`Pooling` as a section (``options.section(Pooling, help=..., choices=..., pooling=DEFAULT)``: its own help,
choices and default, as their flags had), and asks it: ``embed`` to pool (:meth:`Pooling.pool`), fine-tuning to
build its head; the mean over real tokens is one function for both (:func:`mean_pool`). What a fine-tuned run's
saved settings say of it (:func:`trained_with`: the starting weights' head, the export) and why a mean-pooled
head has no Hugging Face export (:func:`export_refusal`) are said here too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from bertstream.cli import options
from bertstream.cli.errors import check
from bertstream.cli.options import FIXED, opt

POOLINGS = ("cls", "mean", "none")
SENTENCE_HEAD = ("cls", "mean")  # what a fine-tuning head pools by (none gives no sentence vector)


def mean_pool(states: Tensor, attention_mask: Tensor) -> Tensor:
    """[B, T, H] averaged over the real tokens of [B, T] -> [B, H] ([CLS] and [SEP] included, padding not)."""
    keep = attention_mask.to(states.dtype).unsqueeze(-1)  # [B, T, 1]
    return (states * keep).sum(1) / keep.sum(1).clamp(min=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pooling:
    """The pooling section of ``embed`` and ``finetune`` (FIXED: a fine-tuning resume keeps it)."""

    pooling: str = opt("cls", "cls: the [CLS] vector; mean: over real tokens; none: every token's vector.",
                       choices=POOLINGS, tags=(FIXED,))  # fmt: skip

    def __post_init__(self) -> None:
        check(self.pooling in POOLINGS, "pooling", f"must be one of {POOLINGS}, got {self.pooling!r}")

    @property
    def per_token(self) -> bool:
        """Every token's vector is kept (``none``): ``[B, T, D]``, one row of vectors a text."""
        return self.pooling == "none"

    def pool(self, states: Tensor, attention_mask: Tensor) -> Tensor:
        """``[B, D]`` (cls, mean) or ``[B, T, D]`` (none) from the states ``[B, T, D]``."""
        if self.pooling == "cls":
            return states[:, 0]
        if self.pooling == "mean":  # real tokens only: padding must not pull the average
            return mean_pool(states, attention_mask)
        return states


def trained_with(saved: dict[str, Any]) -> str:
    """The pooling a fine-tuned checkpoint's saved settings (its ``config.json``'s ``"finetune"``) name, in either
    layout (the section, or the top of runs saved before it); cls for runs from before the flag."""
    return str(options.saved_leaf(saved, "pooling", "cls"))


def export_refusal(saved: dict[str, Any], source: str) -> str | None:
    """Why the fine-tuned checkpoint ``source`` (its saved settings ``saved``) has no Hugging Face export: only
    [CLS] pooling has a counterpart there, and a mean-pooled head exported as one would give other logits. None
    when it has."""
    pooling = trained_with(saved)
    if pooling == "cls":
        return None
    return (
        f"{source} was fine-tuned with --pooling {pooling}: no transformers sequence classifier pools that way "
        "(they read the [CLS] state), so its logits cannot be exported; fine-tune with --pooling cls to serve it"
    )
