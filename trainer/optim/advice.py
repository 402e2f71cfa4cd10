"""The learning rates that suit a model's width, and the one-line warning a run ends with when it learned nothing.

``--lr`` keeps one number as its default per command (pretraining 1e-4, fine-tuning 5e-5: BERT-base's), which a
narrow model does not learn from in a short run (tiny fine-tuned at 5e-5 for 3 epochs predicted one class for
all 872 SST-2 dev rows; pretrained 200 steps at 1e-4, its loss went 10.91 -> 10.65). The rates that worked are
in ``docs/results.md`` and the recipes: tiny and mini pretrain at 1e-3 and fine-tune at 3e-4 (the sweep's best;
the demo's 1e-3 for 2 epochs), small/medium between, base and large BERT's 1e-4 and 2e-5..5e-5. The table
below is that evidence by hidden size; the warnings name its rate, and the README's recipe passes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (torch is not imported with the flags' help, which reads LR_HELP)
    from bertstream.trainer.optim.schedule import Schedule

# (largest hidden size, pretraining --lr, fine-tuning --lr), narrowest first; the last row takes every wider model
LR_BY_HIDDEN: tuple[tuple[int, float, float], ...] = (
    (256, 1e-3, 3e-4),  # tiny (H128), mini (H256)
    (512, 5e-4, 1e-4),  # small, medium (H512)
    (1 << 62, 1e-4, 5e-5),  # base (H768), large (H1024): BERT's own
)
PHASES = ("pretrain", "finetune")


def rate(lr: float) -> str:
    """A rate as the recipes write it: 1e-3, 3e-4, 5e-5 (``:g`` gives 0.001 and 5e-05)."""
    if lr >= 0.1:
        return f"{lr:g}"
    mantissa, exponent = f"{lr:.3e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


# What a diverged run (a NaN or inf loss) is told to change first (``training.diverged``)
DIVERGED_HINT = "lower --lr, or check the data"

# --lr's help, one sentence from the table (both commands; each shows its own default beside it)
LR_HELP = (
    "The default is BERT-base's; narrower models need more: "
    + "; ".join(f"hidden size <= {h}: {rate(p)} pretraining, {rate(f)} fine-tuning" for h, p, f in LR_BY_HIDDEN[:-1])
    + " (a run that learned nothing ends with a warning naming the rate)."
)

# --layer-decay's help (fine-tuning): the rates it gives, each a share of --lr, as optim.groups.param_groups scales them
LAYER_DECAY_HELP = (
    "Layer-wise learning-rate decay: the head gets --lr, encoder layer l of L gets --lr * decay^(L + 1 - l), "
    "the embeddings --lr * decay^(L + 1); 1: one rate for all."
)


def suggested_lr(hidden_size: int, phase: str) -> float:
    """The table's ``--lr`` for a model of ``hidden_size`` in ``phase`` (pretrain or finetune)."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    row = next(r for r in LR_BY_HIDDEN if hidden_size <= r[0])
    return row[1] if phase == "pretrain" else row[2]


def lr_hint(lr: float, hidden_size: int, phase: str) -> str:
    """The advice a warning ends with: the rate the table gives for this width, or, where the run used that
    already, a larger one (twice the rate, or more epochs/steps)."""
    good = suggested_lr(hidden_size, phase)
    if lr < good:
        return f"try --lr {rate(good)} (the rate for hidden size {hidden_size}; this run used {rate(lr)})"
    return (
        f"this run used --lr {rate(lr)} (the rate for hidden size {hidden_size} is {rate(good)}): "
        "try more steps or another --lr"
    )


# Pretraining: how far the training loss must have fallen, and after how many steps of this run, to count as learning.
PRETRAIN_MIN_STEPS = 20
PRETRAIN_MOVED = 0.97  # the last logged loss above 97% of the first: barely moved (10.91 -> 10.65 is 97.6%)


def pretrain_warning(
    first: tuple[int, float], last: tuple[int, float], lr: float, hidden_size: int, schedule: Schedule
) -> str | None:
    """One ``warning:`` line when the training loss barely moved between the first and the last logged
    (step, loss) of a run from fresh weights (the caller's choice), over at least ``PRETRAIN_MIN_STEPS`` steps;
    None otherwise. ``schedule``: the run's, which says whether its warm-up had ended."""
    steps = last[0] - first[0]
    if steps < PRETRAIN_MIN_STEPS or not last[1] > PRETRAIN_MOVED * first[1]:
        return None
    return (
        f"warning: the training loss barely moved in {steps} steps ({first[1]:.4f} -> {last[1]:.4f})"
        f"{schedule.never_peaked(last[0])}: "
        f"{lr_hint(lr, hidden_size, 'pretrain')}"
    )
