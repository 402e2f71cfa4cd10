"""The model section of a pretraining run (``--model``, ``--model-config``, ``--norm-placement``, ``--init-from``,
``--dropout``): which encoder to train and where its first weights come from, turned into the model's
configuration here, so that no other module reads these settings."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import ClassVar

from bertstream.cli import options
from bertstream.cli.errors import UsageError, check
from bertstream.cli.options import ARCH, FIXED, opt
from bertstream.trainer.checks import check_finite
from bertstream.trainer.model_config import NORM_PLACEMENTS, PRESET_NAMES, BertConfig, find_preset, with_dropout

_ARCH = (FIXED, ARCH)  # an architecture setting (which a resume keeps)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelChoice:
    """Which encoder to train and where its first weights come from. The settings tagged ``ARCH`` choose the
    architecture of a new run: a resumed run has its checkpoint's, ``--init-from`` its model's (a flag that
    would choose another is refused by name, one not given is taken from there)."""

    preset: str = opt(
        "tiny",
        "Preset (L2/H128 .. L24/H1024); vocab size from the data.",
        flag="--model",
        choices=PRESET_NAMES,
        tags=_ARCH,
    )
    model_config: str | None = opt(None, "JSON of BertConfig fields overriding the preset.", path="file", tags=_ARCH)
    norm_placement: str | None = opt(
        None,
        "post: BERT's layer norms (the presets' default; exported as Hugging Face BERT); pre: pre-LN (Cramming), "
        "stable at high learning rates (exported as RoBERTa-PreLayerNorm). With --init-from: the model's own.",
        flag="--norm-placement",
        choices=NORM_PLACEMENTS,
        tags=_ARCH,
    )
    init_from: str | None = opt(
        None,
        "Start from these weights: a Hugging Face BERT or RoBERTa-PreLayerNorm folder, or our checkpoint.",
        path="dir",
        tags=(FIXED,),
    )
    dropout: float | None = opt(
        None, "Hidden and attention dropout (default: the model's, 0.1 for the presets).", tags=(FIXED,)
    )

    def __post_init__(self) -> None:
        check_finite(self)
        check(self.dropout is None or 0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        check(
            self.norm_placement is None or self.norm_placement in NORM_PLACEMENTS,
            "norm_placement",
            f"must be one of {', '.join(NORM_PLACEMENTS)}, got {self.norm_placement!r}",
        )

    # What a resume says of --dropout, written with its declaration: an elastic resume restarts the dropout
    # streams (pretrain/restore.py), and it is the one setting of the model a new phase may change
    # (pretrain/resume.py's refusal of the others).
    SAME_LOSSES: ClassVar[str] = "the same losses need --dropout 0"
    NEW_PHASE_MAY_CHANGE: ClassVar[str] = "only --dropout may change for a new phase"

    def trained(self, config: BertConfig) -> BertConfig:
        """The model configuration the run trains: ``config`` (the checkpoint's, ``--init-from``'s, or
        :meth:`new` 's) with ``--dropout`` when given. The inputs take the model from here, none reads the field."""
        return with_dropout(config, self.dropout)

    def new(self, vocab_size: int) -> BertConfig:
        """A new model's configuration before ``--model-config``: the ``--model`` preset over the data's
        vocabulary, with ``--norm-placement`` (post, the presets' own, when not given)."""
        preset = find_preset(self.preset)
        if preset is None:
            raise ValueError(f"--model must be one of {', '.join(PRESET_NAMES)}; got {self.preset!r}")
        return replace(preset(vocab_size), norm_placement=self.norm_placement or "post")

    def refuse_other_architecture(self, init: BertConfig, given: Collection[str]) -> None:
        """``--init-from``'s model is the run's architecture: a flag tagged ``ARCH`` given with another value
        than that model's is refused by name (one not given is taken from the model)."""
        for name in options.tagged(ModelChoice, ARCH):
            value = getattr(self, name)
            if name in given and value != getattr(init, name, None):
                raise UsageError(
                    name,
                    f"{value}, but --init-from {self.init_from} is a {init.norm_placement}-LN model: "
                    f"drop {options.flag_for(ModelChoice, name)} (the model's own architecture is used)",
                )
