"""Whether a fine-tuning run learned anything: the one ``warning:`` line a run ends with when its best epoch's dev
predictions (or its last epoch's) are all one class (NER: one tag, 'O') while the gold has several, or when its eval loss did not move
over its epochs. README's step 5 at tiny's BERT-base rate (5e-5, 3 epochs) scored 0.5092 with all 872 SST-2
predictions '1' and said nothing; the line names ``--lr`` and the rate that suits the model's width
(:mod:`bertstream.trainer.optim.advice`)."""

from __future__ import annotations

from typing import Any

from bertstream.trainer.optim.advice import lr_hint

FLAT_LOSS = 0.01  # every epoch's eval loss within 1% of the first: it did not move


def flat_eval_loss(losses: list[float]) -> bool:
    """Two or more epochs' eval losses, all within ``FLAT_LOSS`` of the first."""
    return len(losses) >= 2 and all(abs(x - losses[0]) <= FLAT_LOSS * abs(losses[0]) for x in losses)


def finetune_warning(results: dict[str, Any], lr: float, hidden_size: int) -> str | None:
    """The run's one warning line from results.json's epochs (each may carry ``one_class``: [label, count] of its
    predictions, see ``Task.one_class``) and best epoch; None for a run that learned."""
    epochs, best = results["epochs"], results["best"]
    # every evaluation, in step order: the epochs' and those inside them (--eval-every)
    rows = sorted([*epochs, *results.get("evaluations", [])], key=lambda e: (e.get("step", 0), "train_loss" in e))
    said = []

    def is_best(e: dict[str, Any]) -> bool:
        return best is not None and (e.get("step"), e.get("epoch")) == (best.get("step"), best.get("epoch"))

    # the best evaluation's (the predictions file), else the last one's: a run can end collapsed after a noisy start
    chosen = [("best", e) for e in rows if is_best(e)] + [("last", r) for r in rows[-1:]]
    which, entry = next(((w, e) for w, e in chosen if e.get("one_class")), (None, None))
    if entry is not None:
        label, count = entry["one_class"]
        said.append(f"all {count} dev predictions of the {which} epoch are {label!r} (one class)")
    losses = [e["eval"]["loss"] for e in epochs if "loss" in e.get("eval", {})]
    if flat_eval_loss(losses):
        said.append(f"the eval loss did not move over {len(losses)} epochs ({losses[0]:.4f} -> {losses[-1]:.4f})")
    if not said:
        return None
    return f"warning: {'; '.join(said)}: the model learned nothing; {lr_hint(lr, hidden_size, 'finetune')}"
