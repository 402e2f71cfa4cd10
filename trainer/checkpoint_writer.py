"""The checkpoints a run writes (:class:`CheckpointWriter`: rank 0 writes, in the loop or in the background,
every rank learns how it went), with every rank's RNG state (:func:`gather_rng`, :func:`restore_rng`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import distributed as D
from bertstream.trainer.errors import RunError
from bertstream.trainer.runtime import log
from bertstream.trainer.snapshot import Background, HostCopy, copied_event, describe_write
from bertstream.trainer.training import Training


@dataclass(frozen=True, slots=True)
class CheckpointWriter:
    """How a run writes its checkpoints: its configuration and vocabulary go into every one; rank 0 writes, every
    rank learns how it went. ``writes``: the background writer (:mod:`bertstream.trainer.snapshot`), or None to
    write in the loop; ``announce``: log ``checkpoint PATH`` once a background write is complete (pretraining)."""

    config: dict[str, Any]  # config.json: the model, the command's flags, the vocabulary's hash, the world size
    vocab_text: str
    info: D.DistInfo
    writes: Background | None = None
    announce: bool = False
    host: HostCopy = field(default_factory=HostCopy)

    def save(
        self, root: Path, training: Training, state: dict[str, Any], *, keep: int = 1, resumable: bool = True
    ) -> Path | None:
        """``training``'s weights and ``state`` (state.json) as checkpoint ``training.step`` under ``root``, the
        newest ``keep`` kept; ``resumable``: with the optimizer, the schedule and every rank's RNG, what
        :meth:`Training.restore` and a resume read. A collective: every rank calls it. Returns the folder on rank
        0 once written; None while it is written in the background (then :meth:`poll` and :meth:`finish` say
        when it is complete).

        Before the copy, the last background write is waited for, and every rank learns whether it failed: one
        error raised alike on every rank (rank 0's ``CheckpointError``, a full disk), not rank 0 alone while the
        others wait in their next collective."""
        rng = gather_rng(self.info) if resumable else {}
        if resumable:
            state = {"scheduler": training.scheduler.state_dict(), **state}
            if training.scaler is not None:  # fp16's loss scale, so a resume goes on with it
                state["grad_scaler"] = training.scaler.state_dict()
        path = None
        with D.all_or_none(self.info, rank0_only=True):  # no collective inside: rank 0's failure is the run's
            if self.info.is_main:
                self._settle()
                live: dict[str, Any] = {
                    "model": training.raw.state_dict(),
                    "optimizer": training.optimizer.state_dict() if resumable else None,
                    "rng": rng,
                    "state": state,
                }
                copied = live if self.writes is None else self.host.copy(live)  # in the loop: nothing changes it
                ready = copied_event(self.info.device)
                # The step the copy holds, read now: the writer may run steps later, when training.step has moved
                # on (a checkpoint named step-4 holding step 1's weights).
                step = training.step

                def write() -> Path:
                    ready()
                    return ckpt.save(
                        root,
                        step,
                        model_state=copied["model"],
                        optimizer=copied["optimizer"],
                        rng=copied["rng"],
                        state=copied["state"],
                        config=self.config,
                        vocab_text=self.vocab_text,
                        keep=keep,
                    )

                if self.writes is None:
                    path = write()
                else:
                    self.writes.start(write)
        if self.writes is not None:  # (written in the loop: the exchange above was after the write, a barrier)
            self.writes.outstanding = True  # on every rank: they meet for it in poll and finish
        return path

    def poll(self, *, meet: bool) -> None:
        """Between checkpoints, at each step: a background write that ended is announced, or its error raised.
        With one process this is a look at the thread (no device sync); with several, the ranks meet for it only
        where ``meet`` (a log step, which reads the device anyway), so that every rank raises rank 0's error; they
        meet at each log step until the next checkpoint or the end (only rank 0 knows when its write ended)."""
        if self.writes is None or not self.writes.outstanding:
            return
        if not self.info.enabled:
            if self.writes.done():
                self._settle()
                self.writes.outstanding = False
        elif meet:
            with D.all_or_none(self.info, rank0_only=True):
                if self.info.is_main and self.writes.done():
                    self._settle()

    def finish(self) -> None:
        """The end of the run (a collective): the last background write complete, or its error on every rank."""
        if self.writes is not None:
            with D.all_or_none(self.info, rank0_only=True):
                if self.info.is_main:
                    self._settle()
            self.writes.outstanding = False

    def _settle(self) -> None:
        """Rank 0: wait for the write in flight; log it once complete, or raise its error."""
        if self.writes is None or not self.writes.pending:
            return
        path = self.writes.wait()
        if self.announce and path is not None:
            log(describe_write(path, self.writes.seconds))


def background_writes() -> Background:
    """The run's background checkpoint writer (a context manager: leaving it waits for the write in flight); a
    write that fails while the run is already failing for another reason is said on its own line."""
    return Background(report=lambda line: log(f"the checkpoint being written in the background failed too: {line}"))


def background_if_asked(run: Any, writes: Background) -> Background | None:
    """The run's background writer when its checkpoints are written in the background (the run section's
    ``async_checkpoint``, read here only), else None: each is written in the loop."""
    return writes if run.async_checkpoint else None


def gather_rng(info: D.DistInfo) -> dict[str, torch.Tensor]:
    """Every rank's generator states as ``rank{r}.{name}`` (a collective: call it on every rank)."""
    states = D.all_gather_object(ckpt.rng_state(info.device), info)
    return {f"rank{r}.{k}": v for r, s in enumerate(states) for k, v in s.items()}


def restore_rng(rng: Mapping[str, torch.Tensor], info: D.DistInfo, source: Path, saved_world: object) -> None:
    """Set this rank's generators from a :func:`gather_rng` dict; a rank the checkpoint lacks is refused."""
    mine = {k.split(".", 1)[1]: v for k, v in rng.items() if k.startswith(f"rank{info.rank}.")}
    if not mine:
        raise RunError(
            f"{source}: rng.pt holds no state for rank {info.rank} (it was saved by {saved_world} "
            "processes): resume with that many processes"
        )
    try:
        ckpt.set_rng_state(mine, info.device)
    except (TypeError, RuntimeError) as e:  # another tensor type or size: a damaged file (tracebacks before)
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise RunError(f"{source}/rng.pt: rank {info.rank}'s generator state does not load ({first})") from None
