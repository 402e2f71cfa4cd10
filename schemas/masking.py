"""The masked-LM rule: which positions of a row carry a prediction and what each becomes (80/10/10).

Google's ``create_masked_lm_predictions``, over random keys the caller supplies, one per row: the pipeline
keys its static masks by instance id, the trainer its dynamic ones by (seed, epoch, instance id). The same
rule and keys give the same masks whatever the batch, its padding or the worker.

- Candidates: every position of ``[CLS] A [SEP] B [SEP]`` but [CLS] and the two [SEP]s.
- How many: :func:`num_to_predict`, ``min(max_predictions, max(1, round(length * probability)))`` over the
  whole length (Python's round: half to even), and at most the candidates.
- Which: the candidates in random order, the first that many; whole-word masking takes words instead (a
  candidate and the candidates right after it that continue its word: ``##`` pieces, or a segmenter's)
  while they fit, skipping a word that would overflow, so a row may get fewer.
- What each becomes: [MASK] with probability ``mask_fraction`` (``MASK_FRACTION``), else the token itself
  (``keep_fraction``) or, in the rest, a token drawn uniformly from the vocabulary's ordinary entries (never
  special or ``[unused*]``; Google's could insert [CLS] or [PAD]).

The settings travel as one object, :class:`MaskingSettings`, from each command's config (``bertprep
pretraining``'s flags, ``berttrain pretrain --masking dynamic``'s) to the rule: a new setting of the rule is a
field here and a flag in each of the two configs.

Randomness: each draw is SplitMix64 of (key, position, purpose) (``bertstream.schemas.hashing``), so a
whole batch is drawn with a few vectorised array operations. The pipeline's compiled kernel
(``bertstream.pipelines.pretraining.kernels.masking``) computes exactly this, with these constants passed in;
a test holds it to :func:`mask`, and the shard pins hold the pipeline's masks to their bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertstream.schemas.hashing import GOLDEN, mix64_array, uniform_from
from bertstream.schemas.pretraining import SPECIALS_PER_ROW
from bertstream.schemas.vocab import MASK, Vocab, is_reserved

MASK_FRACTION = 0.8  # predictions that become [MASK]
KEEP_FRACTION = 0.1  # predictions that keep their token
RANDOM_FRACTION = 0.1  # predictions that become a random ordinary token
assert abs(MASK_FRACTION + KEEP_FRACTION + RANDOM_FRACTION - 1.0) < 1e-12
# A prediction not masked is kept with this probability (the second draw's threshold; 0.5 exactly).
KEEP_OF_REST = KEEP_FRACTION / (KEEP_FRACTION + RANDOM_FRACTION)
# A draw is mix64(key * GOLDEN + position * POSITION_STEP + purpose); POSITION_STEP is odd, so a row's keys
# differ at every position. Purposes: the candidates' order, mask or not, keep or replace, the replacement.
POSITION_STEP = 0xD6E8FEB86659FD93
PICK, MASK80, KEEP50, RANDOM = 1, 2, 3, 4
_NO_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)  # sorts after every candidate's key


def num_to_predict(
    lengths: np.ndarray, probability: float, max_predictions: int | None = None, *, within_candidates: bool = False
) -> np.ndarray:
    """MLM predictions per row of ``lengths`` tokens (specials included): the reference's count rule
    ``min(max_predictions, max(1, round(length * probability)))``, ``np.round`` rounding half to even exactly
    like Python's ``round``; ``max_predictions=None``: no cap. ``within_candidates`` also caps it at the
    candidates (every position but [CLS] and the two [SEP]s), as the masks hold it."""
    k = np.maximum(1, np.round(lengths.astype(np.float64) * probability).astype(np.int64))
    if max_predictions is not None:
        k = np.minimum(k, max_predictions)
    if within_candidates:
        k = np.minimum(k, np.maximum(lengths - SPECIALS_PER_ROW, 0))
    return k


class SettingError(ValueError):
    """A masking setting out of its range: ``name`` (the setting), ``message`` (what it must be)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name, self.message = name, message


@dataclass(frozen=True, slots=True)
class MaskingSettings:
    """The settings of the rule, named as the manifest records them (Google's names): how many positions
    (``masked_lm_prob``, ``max_predictions_per_seq``: None, no cap), which (``whole_word_mask``) and what each
    becomes (the 80/10/10 split). Each command's config builds it from its flags, and turns a
    :class:`SettingError` into a usage error of the flag of that name."""

    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int | None = None
    whole_word_mask: bool = False
    mask_fraction: float = MASK_FRACTION
    keep_fraction: float = KEEP_FRACTION
    random_fraction: float = RANDOM_FRACTION

    def __post_init__(self) -> None:
        if not 0 < self.masked_lm_prob < 1:
            raise SettingError("masked_lm_prob", f"must be in (0, 1), got {self.masked_lm_prob}")
        k = self.max_predictions_per_seq
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise SettingError("max_predictions_per_seq", f"must be an integer >= 1, got {k!r}")
        split = {"mask_fraction": self.mask_fraction, "keep_fraction": self.keep_fraction}
        split["random_fraction"] = self.random_fraction
        for name, share in split.items():
            if not 0 <= share <= 1:
                raise SettingError(name, f"must be in [0, 1], got {share}")
        if abs(sum(split.values()) - 1.0) > 1e-9 or self.mask_fraction == 1:
            shares = ", ".join(f"{k} {v}" for k, v in split.items())
            raise SettingError("mask_fraction", f"the split must add up to 1 and not all be [MASK], got {shares}")

    @property
    def keep_of_rest(self) -> float:
        """A prediction not masked is kept with this probability (the second draw's threshold)."""
        return self.keep_fraction / (self.keep_fraction + self.random_fraction)


@dataclass(frozen=True, slots=True)
class MaskingRule:
    """The rule's settings over one vocabulary (picklable into Beam and DataLoader workers)."""

    mask_id: int
    random_ids: np.ndarray  # [R] ids eligible as random replacements (never reserved tokens)
    is_continuation: np.ndarray  # [V] bool: the token is a "##" piece
    settings: MaskingSettings

    @property
    def probability(self) -> float:
        return self.settings.masked_lm_prob

    @property
    def max_predictions(self) -> int | None:
        return self.settings.max_predictions_per_seq

    @property
    def whole_word(self) -> bool:
        return self.settings.whole_word_mask

    @classmethod
    def for_vocab(cls, vocab: Vocab, settings: MaskingSettings) -> MaskingRule:
        random_ids = np.asarray([i for i, t in enumerate(vocab.tokens) if not is_reserved(t)], dtype=np.int64)
        if not len(random_ids):
            raise ValueError("vocabulary has no ordinary tokens to draw random replacements from")
        return cls(
            mask_id=vocab.id(MASK),
            random_ids=random_ids,
            is_continuation=np.asarray([t.startswith("##") for t in vocab.tokens], dtype=bool),
            settings=settings,
        )


@dataclass(frozen=True, slots=True)
class Masks:
    """Masked rows ``input_ids`` [B, T] and their predictions, listed row-major (positions ascend in a row):
    ``rows`` [P], ``positions`` [P] and the original ids ``labels`` [P]."""

    input_ids: np.ndarray
    rows: np.ndarray
    positions: np.ndarray
    labels: np.ndarray


def draw_bits(keys: np.ndarray, positions: np.ndarray, purpose: int) -> np.ndarray:
    """uint64 draws for ``purpose`` at ``positions`` of the rows keyed ``keys`` (broadcast: [B, 1] and [1, T]
    give a grid, [P] and [P] the listed ones)."""
    with np.errstate(over="ignore"):
        x = (
            np.asarray(keys, dtype=np.uint64) * np.uint64(GOLDEN)
            + np.asarray(positions).astype(np.uint64) * np.uint64(POSITION_STEP)
            + np.uint64(purpose)
        )
    return mix64_array(x)


def mask(
    original: np.ndarray,
    lengths: np.ndarray,
    seg_a: np.ndarray,
    keys: np.ndarray,
    rule: MaskingRule,
    continues: np.ndarray | None = None,
) -> Masks:
    """Mask ``original`` [B, T] (rows ``[CLS] A [SEP] B [SEP]`` of ``lengths`` [B], ``seg_a`` [B] tokens in
    ``[CLS] A [SEP]``, padded past their length) with one uint64 key per row, ``keys`` [B]. Whole-word
    masking reads ``continues`` [B, T] bool, "the token continues the previous token's word" (default: it
    is a ``##`` piece)."""
    b, t = original.shape
    lengths = np.asarray(lengths, dtype=np.int64)
    seg_a = np.asarray(seg_a, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.uint64)
    pos = np.arange(t)[None, :]  # [1, T]
    candidate = (pos < lengths[:, None]) & (pos != 0) & (pos != seg_a[:, None] - 1) & (pos != lengths[:, None] - 1)
    order = draw_bits(keys[:, None], pos, PICK)  # [B, T] the candidates' random order
    order[~candidate] = _NO_KEY
    k = num_to_predict(lengths, rule.probability, rule.max_predictions, within_candidates=True)  # [B]
    if rule.whole_word:
        if continues is None:
            continues = rule.is_continuation[original]
        chosen = _whole_words(candidate, continues, order, k)
    else:
        chosen = _first_k(candidate, order, k)
    rows, cols = np.nonzero(chosen)  # row-major: ascending positions within a row
    labels = original[rows, cols]
    bits = draw_bits(keys[rows], cols, MASK80)  # [P] drawn only where chosen
    replacement = rule.random_ids[
        (mix64_array(bits ^ np.uint64(RANDOM)) % np.uint64(len(rule.random_ids))).astype(np.int64)
    ]
    split = rule.settings
    kept = np.where(uniform_from(mix64_array(bits ^ np.uint64(KEEP50))) < split.keep_of_rest, labels, replacement)
    out = original.copy()
    out[rows, cols] = np.where(uniform_from(bits) < split.mask_fraction, rule.mask_id, kept)
    return Masks(out, rows, cols, labels)


def _first_k(candidate: np.ndarray, key: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[B, T] the ``k[i]`` candidates of smallest key in each row (a row's keys are distinct)."""
    b, _ = key.shape
    kmax = int(k.max(initial=0))
    if kmax == 0:
        return np.zeros(key.shape, dtype=bool)
    smallest = np.sort(np.partition(key, kmax - 1, axis=1)[:, :kmax], axis=1)  # [B, kmax] ascending
    threshold = smallest[np.arange(b), np.maximum(k - 1, 0)]  # [B] the k-th smallest key
    return candidate & (key <= threshold[:, None]) & (k > 0)[:, None]


def _whole_words(candidate: np.ndarray, continues: np.ndarray, key: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[B, T] chosen positions: whole words in the order of their first piece's key while they fit in ``k``
    [B], a word that would overflow skipped; vectorised over rows."""
    b, t = candidate.shape
    prev_candidate = np.zeros_like(candidate)
    prev_candidate[:, 1:] = candidate[:, :-1]
    starts = candidate & ~(continues & prev_candidate)  # [B, T] a word begins here
    word = np.maximum(np.cumsum(starts, axis=1) - 1, 0)  # [B, T] word index (meaningful at candidates)
    r, c = np.nonzero(candidate)
    sizes = np.bincount(r * t + word[r, c], minlength=b * t).reshape(b, t)  # [B, W<=T] pieces per word
    word_key = np.full((b, t), _NO_KEY)  # [B, W] the key of each word's first piece
    r, c = np.nonzero(starts)
    word_key[r, word[r, c]] = key[r, c]
    # Flat indices instead of take_along_axis, whose index construction costs more than the gathers here.
    row_start = np.arange(b)[:, None] * t  # [B, 1]
    order = np.argsort(word_key, axis=1) + row_start  # [B, W] words in random order, then no-words (size 0)
    ordered_sizes = sizes.ravel()[order]  # [B, W]
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
