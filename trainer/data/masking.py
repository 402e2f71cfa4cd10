"""Dynamic masking: fresh masks every epoch, drawn from the static shards by the contract's masking rule.

Schema v1 keeps the masked sequence plus the original ids at the masked positions, so a batch's original
sequences are rebuilt exactly (:func:`restore`) and masked again (:meth:`Masker.mask`) by the rule the static
masks were written with (``bertstream.schemas.masking``: 80/10/10, the count, whole words), keyed here by
(seed, epoch, instance id) instead of the instance id alone: a mask depends neither on the batch an instance
lands in, its padding, the worker count nor on where a run was resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertstream.schemas import masking as rule_
from bertstream.schemas.hashing import GOLDEN, mix64_array
from bertstream.schemas.manifest import load_vocab
from bertstream.schemas.masking import MaskingRule, MaskingSettings
from bertstream.schemas.vocab import Vocab
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.refs import read_text
from bertstream.trainer.data.sources import Catalog

MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Masked:
    """A re-masked batch: ``input_ids`` [B, T] and the predictions, ``positions``/``labels`` [B, P] padded
    with 0 past ``counts`` [B] (P = the most predictions of any row; positions ascend within a row)."""

    input_ids: np.ndarray
    positions: np.ndarray
    labels: np.ndarray
    counts: np.ndarray


def instance_keys(seed: int, epoch: int | np.ndarray, instance_ids: np.ndarray) -> np.ndarray:
    """[B] uint64 keys of the masking rule, one per (seed, epoch, instance id); ``epoch`` is one int or [B]
    (the pass of each row's source, which is the epoch except for a weighted folder that wraps)."""
    with np.errstate(over="ignore"):
        run = mix64_array(np.uint64((seed * GOLDEN) & MASK64) + np.asarray(epoch, dtype=np.int64).astype(np.uint64))
        return mix64_array(mix64_array(np.asarray(instance_ids, dtype=np.uint64) ^ run) + np.uint64(GOLDEN))


def restore(input_ids: np.ndarray, positions: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The unmasked sequences [B, T]: ``labels`` [B, P] written back at ``positions`` where ``weights`` [B, P]."""
    out = input_ids.copy()
    rows, slots = np.nonzero(weights)
    out[rows, positions[rows, slots]] = labels[rows, slots]
    return out


@dataclass(frozen=True, slots=True)
class Masker:
    """The masking rule over one vocabulary and the run's seed; picklable into DataLoader workers."""

    rule: MaskingRule
    seed: int

    @classmethod
    def for_vocab(cls, vocab: Vocab, settings: MaskingSettings, *, seed: int) -> Masker:
        return cls(MaskingRule.for_vocab(vocab, settings), seed)

    def mask(
        self,
        original: np.ndarray,
        lengths: np.ndarray,
        seg_a: np.ndarray,
        instance_ids: np.ndarray,
        epoch: int | np.ndarray,
    ) -> Masked:
        """Mask ``original`` [B, T] (rows ``[CLS] A [SEP] B [SEP]`` of ``lengths`` [B], ``seg_a`` [B] tokens in
        ``[CLS] A [SEP]``) for ``epoch``; ``instance_ids`` [B] key each row's draws."""
        b = len(original)
        m = rule_.mask(original, lengths, seg_a, instance_keys(self.seed, epoch, instance_ids), self.rule)
        counts = np.bincount(m.rows, minlength=b)
        width = int(counts.max(initial=0))
        slots = np.arange(len(m.rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        positions = np.zeros((b, width), np.int64)
        labels = np.zeros((b, width), np.int64)
        positions[m.rows, slots] = m.positions
        labels[m.rows, slots] = m.labels
        return Masked(m.input_ids, positions, labels, counts)


def dynamic_masker(config: DataConfig, catalog: Catalog, vocab: Vocab | None = None) -> Masker | None:
    """The masker ``config`` asks for (None: static masks), over ``vocab`` or the vocabulary of the first dataset
    folder (the catalog has checked that every folder shares it)."""
    if config.masking != "dynamic":
        return None
    if vocab is None:
        root, manifest = catalog.folders[0], catalog.manifests[0]
        vocab = load_vocab(manifest, lambda name: read_text(root, name), root.rstrip("/") + "/" + manifest.vocab_file)
    return Masker.for_vocab(vocab, config.masking_settings, seed=config.seeds.masks)
