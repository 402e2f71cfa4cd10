"""Dynamic masking: fresh 80/10/10 MLM masks every epoch, drawn from the static shards.

Schema v1 keeps the masked sequence plus the original ids at the masked positions, so a batch's original
sequences are rebuilt exactly (:func:`restore`) and masked again (:meth:`Masker.mask`).

Rule (the one ``bertstream.pipelines.pretraining.masking`` writes the static masks with, mirrored here because the trainer never
imports the pipelines): candidates are all positions but [CLS] and the two [SEP]s;
``num_to_predict = min(max_predictions, max(1, round(length * p)))`` over the whole length, specials included
(Python's round: half to even), and at most ``length - 3``; that many candidates in random order; each
becomes [MASK] with probability 0.8, stays with probability 0.1, else becomes a token drawn uniformly from
the vocabulary *excluding* special and ``[unused*]`` entries (``bertstream.schemas.vocab.is_reserved``). Whole-word
masking takes words (a token and the ``##`` pieces that follow it among the candidates) in random order
while they fit in ``num_to_predict``, skipping a word that would overflow, so a row may get fewer.

Randomness: a counter-based generator (SplitMix64, ``bertstream.schemas.hashing``) keyed by (seed, epoch, instance id);
the draw for a position is computed from (key, position, purpose) alone, so a mask depends neither on the
batch an instance lands in, its padding, the worker count nor on where a run was resumed, and a whole batch
is drawn with a few vectorised array operations (no per-instance generator objects).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertstream.schemas.hashing import GOLDEN, mix64_array, uniform_from
from bertstream.schemas.manifest import load_vocab
from bertstream.schemas.pretraining import num_to_predict
from bertstream.schemas.vocab import MASK, Vocab, is_reserved
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.refs import read_text
from bertstream.trainer.data.sources import Catalog

MASK_FRACTION, KEEP_FRACTION = 0.8, 0.1  # the rest (0.1) becomes a random ordinary token
_NOT_CANDIDATE = 2.0  # sorts after every uniform draw in [0, 1)
_ORDER, _ACTION, _PICK = 0, 1, 2  # what a draw is for: candidate order, mask/keep/replace, replacement token
_PURPOSES = 3
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
    """[B] uint64 generator keys, one per (seed, epoch, instance id); ``epoch`` is one int or [B] (the pass of
    each row's source, which is the epoch except for a weighted folder that wraps)."""
    with np.errstate(over="ignore"):
        run = mix64_array(np.uint64((seed * GOLDEN) & MASK64) + np.asarray(epoch, dtype=np.int64).astype(np.uint64))
        return mix64_array(mix64_array(np.asarray(instance_ids, dtype=np.uint64) ^ run) + np.uint64(GOLDEN))


def draw(keys: np.ndarray, positions: np.ndarray, purpose: int) -> np.ndarray:
    """Uniforms in [0, 1): output ``position * PURPOSES + purpose`` of the SplitMix64 stream of each key
    (``keys`` and ``positions`` broadcast: [B, 1] and [1, T] give a grid, [N] and [N] the listed draws)."""
    counter = np.asarray(positions).astype(np.uint64) * np.uint64(_PURPOSES) + np.uint64(purpose + 1)
    with np.errstate(over="ignore"):
        return uniform_from(mix64_array(keys + counter * np.uint64(GOLDEN)))


def restore(input_ids: np.ndarray, positions: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The unmasked sequences [B, T]: ``labels`` [B, P] written back at ``positions`` where ``weights`` [B, P]."""
    out = input_ids.copy()
    rows, slots = np.nonzero(weights)
    out[rows, positions[rows, slots]] = labels[rows, slots]
    return out


@dataclass(frozen=True, slots=True)
class Masker:
    """Masking parameters over one vocabulary; picklable into DataLoader workers."""

    mask_id: int
    random_ids: np.ndarray  # [R] ids eligible as random replacements (never reserved tokens)
    is_continuation: np.ndarray  # [V] bool: the token is a "##" piece
    probability: float
    max_predictions: int | None
    whole_word: bool
    seed: int

    @classmethod
    def for_vocab(
        cls, vocab: Vocab, *, probability: float, max_predictions: int | None, whole_word: bool, seed: int
    ) -> Masker:
        random_ids = np.asarray([i for i, t in enumerate(vocab.tokens) if not is_reserved(t)], dtype=np.int64)
        if not len(random_ids):
            raise ValueError("vocabulary has no ordinary tokens to draw random replacements from")
        return cls(
            mask_id=vocab.id(MASK),
            random_ids=random_ids,
            is_continuation=np.asarray([t.startswith("##") for t in vocab.tokens], dtype=bool),
            probability=probability,
            max_predictions=max_predictions,
            whole_word=whole_word,
            seed=seed,
        )

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
        b, t = original.shape
        keys = instance_keys(self.seed, epoch, instance_ids)  # [B]
        pos = np.arange(t)[None, :]  # [1, T]
        candidate = (pos < lengths[:, None]) & (pos != 0) & (pos != seg_a[:, None] - 1) & (pos != lengths[:, None] - 1)
        order_key = draw(keys[:, None], pos, _ORDER)  # [B, T] random order of the candidates
        order_key[~candidate] = _NOT_CANDIDATE
        k = num_to_predict(lengths, self.probability, self.max_predictions, within_candidates=True)
        chosen = self._whole_words(original, candidate, order_key, k) if self.whole_word else _first_k(order_key, k)
        rows, cols = np.nonzero(chosen)  # row-major: ascending positions within a row
        labels = original[rows, cols]
        u = draw(keys[rows], cols, _ACTION)  # drawn only where chosen: a fraction of a [B, T] grid
        replacement = self.random_ids[(draw(keys[rows], cols, _PICK) * len(self.random_ids)).astype(np.int64)]
        new = np.where(
            u < MASK_FRACTION, self.mask_id, np.where(u < MASK_FRACTION + KEEP_FRACTION, labels, replacement)
        )
        out = original.copy()
        out[rows, cols] = new
        counts = np.bincount(rows, minlength=b)
        width = int(counts.max(initial=0))
        slots = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        positions = np.zeros((b, width), np.int64)
        grid_labels = np.zeros((b, width), np.int64)
        positions[rows, slots] = cols
        grid_labels[rows, slots] = labels
        return Masked(out, positions, grid_labels, counts)

    def _whole_words(self, original: np.ndarray, candidate: np.ndarray, key: np.ndarray, k: np.ndarray) -> np.ndarray:
        """[B, T] chosen positions: whole words in the order of their first piece's key while they fit in
        ``k`` [B], a word that would overflow skipped; vectorised over rows."""
        b, t = original.shape
        prev_candidate = np.zeros_like(candidate)
        prev_candidate[:, 1:] = candidate[:, :-1]
        starts = candidate & ~(self.is_continuation[original] & prev_candidate)  # [B, T] a word begins here
        word = np.maximum(np.cumsum(starts, axis=1) - 1, 0)  # [B, T] word index (meaningful at candidates)
        r, c = np.nonzero(candidate)
        sizes = np.bincount(r * t + word[r, c], minlength=b * t).reshape(b, t)  # [B, W<=T] pieces per word
        word_key = np.full((b, t), _NOT_CANDIDATE)  # [B, W] the key of each word's first piece
        r, c = np.nonzero(starts)
        word_key[r, word[r, c]] = key[r, c]
        # Flat indices instead of take_along_axis, whose index construction costs more than the gathers here.
        row_start = np.arange(b)[:, None] * t  # [B, 1]
        order = np.argsort(word_key, axis=1) + row_start  # [B, W] words in random order, then no-words
        ordered_sizes = sizes.ravel()[order]  # [B, W] 0 past a row's last word
        # The greedy pass, in rounds instead of one step per word: a round takes the longest prefix of the
        # remaining words that fits (cumulative sizes are monotone), then drops every word larger than what
        # is left (the budget only shrinks, so none of them can fit later). Rounds: a few, not one per word.
        alive = ordered_sizes > 0  # [B, W] still takeable
        take = np.zeros((b, t), dtype=bool)  # [B, W] in ``order``
        taken = np.zeros(b, np.int64)
        while alive.any():
            sizes_left = np.where(alive, ordered_sizes, 0)
            fits = alive & (np.cumsum(sizes_left, axis=1) + taken[:, None] <= k[:, None])
            take |= fits
            taken += (sizes_left * fits).sum(axis=1)
            alive &= ~fits & (ordered_sizes <= (k - taken)[:, None])
        chosen_words = np.zeros(b * t, dtype=bool)
        chosen_words[order] = take
        return candidate & chosen_words[word + row_start]


def _first_k(key: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[B, T] the ``k[i]`` positions of smallest key in each row (keys are distinct 53-bit draws)."""
    b, _ = key.shape
    kmax = int(k.max(initial=0))
    if kmax == 0:
        return np.zeros(key.shape, dtype=bool)
    smallest = np.sort(np.partition(key, kmax - 1, axis=1)[:, :kmax], axis=1)  # [B, kmax] ascending
    threshold = smallest[np.arange(b), np.maximum(k - 1, 0)]  # [B] the k-th smallest key
    return (key <= threshold[:, None]) & (k > 0)[:, None]


def dynamic_masker(config: DataConfig, catalog: Catalog, vocab: Vocab | None = None) -> Masker | None:
    """The masker ``config`` asks for (None: static masks), over ``vocab`` or the vocabulary of the first dataset
    folder (the catalog has checked that every folder shares it)."""
    if config.masking != "dynamic":
        return None
    if vocab is None:
        root, manifest = config.paths[0], catalog.manifests[0]
        vocab = load_vocab(manifest, lambda name: read_text(root, name), root.rstrip("/") + "/" + manifest.vocab_file)
    return Masker.for_vocab(
        vocab,
        probability=config.mlm_probability,
        max_predictions=config.max_predictions,
        whole_word=config.whole_word_mask,
        seed=config.seed,
    )
