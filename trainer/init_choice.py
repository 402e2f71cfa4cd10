"""``--init``, declared once: the weights ``finetune`` and ``embed`` start from (a checkpoint, a run folder, a
Hugging Face folder, or for fine-tuning ``random:PRESET``/``random:CHECKPOINT``). Each command holds
:class:`InitChoice` as its section (``options.section(InitChoice, help=...)``: its own help, as its flag had) and
asks it for the weights, their vocabulary checked against the data's, the path that an output or an
``--overwrite`` must not touch, and the words that name them in a message. The weights themselves are
:mod:`bertstream.trainer.weights`' (which serves ``pretrain --init-from`` alike and names whichever flag it is
given)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bertstream.cli.errors import check
from bertstream.cli.options import FIXED, opt
from bertstream.schemas.vocab import Vocab
from bertstream.trainer.hf.tasks import HFHead
from bertstream.trainer.weights import Init, check_vocab, resolve_init

FLAG = "--init"


@dataclass(frozen=True, slots=True, kw_only=True)
class InitChoice:
    """The starting-weights section of ``finetune`` and ``embed`` (FIXED: a fine-tuning resume keeps it)."""

    init: str = opt(help="Our checkpoint folder (or run folder) or a Hugging Face BERT folder.", tags=(FIXED,))

    def __post_init__(self) -> None:
        check(bool(self.init), "init", "is required")

    @property
    def input_path(self) -> tuple[str, str]:
        """``(flag, path)``: what the run reads, which its output (or an ``--overwrite`` of it) must not hold."""
        return FLAG, self.init

    def resolve(self, data_vocab: Vocab | None, *, seed: int = 0, heads: Sequence[HFHead] = ()) -> Init:
        """The weights, config and vocabulary ``--init`` names (``data_vocab`` None: no ``random:PRESET``)."""
        return resolve_init(self.init, data_vocab, flag=FLAG, seed=seed, heads=heads)

    def check_vocab(self, init: Init, data_sha256: str, data_root: str) -> None:
        """The data ``data_root`` was tokenised with the weights' vocabulary (refused naming ``--init`` if not)."""
        check_vocab(init, data_sha256, data_root, flag=FLAG)


def named(init: Init) -> str:
    """The weights as a message about them names them: ``--init FOLDER``."""
    return f"{FLAG} {init.source}"
