"""Every random stream of a run, derived from its one ``--seed``: :class:`Seeds`. The configs make it
(``RunConfig.seeds``, and the data section's ``DataConfig.seeds``, which is linked to the same flag); the model, the
data order, the masks, the loader's workers and dropout each take their own stream from it, never the flag. No
global RNG state is seeded but dropout's (torch's generator, which the model's dropout layers draw from)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Seeds:
    """The streams of a run with seed ``base``. Each is a pure function of the seed (and a rank, an epoch, a
    step): a run continued from a checkpoint draws the same numbers as one that never stopped."""

    base: int

    @property
    def init(self) -> int:
        """The model's first weights (and a ``random:`` init's)."""
        return self.base

    @property
    def order(self) -> int:
        """The data order: the shuffle of the shards and samples, fine-tuning's epoch permutations. A data
        position records it (a resume with another order would repeat or skip samples)."""
        return self.base

    @property
    def masks(self) -> int:
        """Dynamic masking: the masks drawn per (seed, epoch, instance)."""
        return self.base

    def workers(self, epoch: int) -> int:
        """The loader's own generator for ``epoch`` (its workers' base seeds): DataLoader otherwise draws them
        from the global torch generator, which would shift dropout's stream whenever a stream starts."""
        return self.base * 1_000_003 + epoch

    def dropout(self, rank: int) -> int:
        """Dropout of ``rank`` (the global torch generator), the same for every run with this seed."""
        return self.base * 1000 + rank

    def dropout_after(self, rank: int, step: int) -> int:
        """Dropout of ``rank`` from ``step`` on, when a resume cannot restore the saved streams (another number of
        processes saved them)."""
        return self.dropout(rank) * 1_000_003 + step
