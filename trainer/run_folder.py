"""The run folder's settings, declared once for ``berttrain pretrain`` and ``berttrain finetune``: ``--output`` (the
folder), ``--resume`` (how a run in it goes on) and ``--overwrite`` (clear it for a new run). Each command's config
holds a :class:`RunFolder` section with its own help, defaults and choices (``cli.options.section``); the values
are checked here, once for both, and what the folder's run becomes (continued, a new phase, started afresh, or
refused) is decided from the section by ``bertstream.trainer.rundir``, which the loops, restore and the inputs
ask. The words that tell a user how a run goes on are the section's too (:data:`CONTINUES`).

Light on purpose (no torch): the configs, and with them ``berttrain --help``, import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertstream.cli.errors import check
from bertstream.cli.options import opt

# --resume's words (its values besides a checkpoint folder): continue the run in --output, or start a new one.
AUTO, NONE = "auto", "none"
CONTINUED_OR_NOT = (AUTO, NONE)  # fine-tuning's choices: it continues its own run or none, never another's
# How a training run that ended on an error goes on from its last complete checkpoint (the loader's worker
# dying, a silent peer: ``bertstream.trainer.peers``), said where those errors are worded.
CONTINUES = "--resume auto continues"
# Fine-tuning's words for the same settings (``FinetuneConfig``'s section): its run keeps results and predictions,
# continues from the end of an epoch, and --overwrite replaces what an earlier run wrote.
FINETUNING_HELP = {
    "output": "Run folder: results.json, predictions, metrics.jsonl, checkpoints/.",
    "resume": "auto: continue the run in --output from the end of its latest epoch (after a kill, the same metrics).",
    "overwrite": "Replace the outputs of an earlier run in --output.",
}
# A new phase (pretraining's --reset-optimizer, ``CheckpointConfig``) starts from the weights of the checkpoint
# that --resume names: its help, and why it is refused without one (``TrainConfig``).
NEW_PHASE_HELP = "With --resume PATH: take the weights only (second training phase)."
NEW_PHASE_NEEDS = "needs --resume PATH (the checkpoint whose weights start the new phase)"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFolder:
    """Where a run writes and how a run already there is treated (pretraining's defaults; fine-tuning gives its
    own help, ``--resume none`` and the choices auto and none)."""

    output: str = opt(help="Run folder: metrics.jsonl, checkpoints/, tensorboard/.")
    resume: str = opt(AUTO, "auto (newest valid checkpoint in --output), none, or a checkpoint folder.")
    overwrite: bool = opt(False, "Clear a non-empty --output whole and start a new run there.")

    def __post_init__(self) -> None:
        check(bool(self.output), "output", "is required")  # "" was the current folder: a run written into it
        check(self.resume != "", "resume", "names no checkpoint ('')")  # "" was the current folder: ".: incomplete"

    def refuse_remote(self, written: str, remote: str) -> None:
        """The folder must be local: a run renames checkpoints into it and writes local files (``written``: what
        the command writes so); ``remote``: the command's inputs that may be URLs, said in the same line."""
        check("://" not in self.output, "output", f"{self.output}: the run folder must be local ({written}); {remote}")

    def refuse_checkpoint_path(self) -> None:
        """Fine-tuning continues the run in its own folder or none: a checkpoint folder given as ``--resume`` (a
        config built in code; its flag takes auto or none only) is refused."""
        check(self.resume in CONTINUED_OR_NOT, "resume", f"must be auto or none, got {self.resume!r}")

    @property
    def run_dir(self) -> Path:
        """The run folder, as the run writes it."""
        return Path(self.output)

    @property
    def continues(self) -> bool:
        """``--resume auto``: the run in the folder goes on from its latest checkpoint, when it has one."""
        return self.resume == AUTO

    @property
    def checkpoint_path(self) -> str | None:
        """``--resume PATH``: the checkpoint folder the run starts from (None: ``auto`` or ``none``)."""
        return None if self.resume in CONTINUED_OR_NOT else self.resume
