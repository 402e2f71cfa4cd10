"""Rows scattered over shard blocks -> one padded batch, with vectorised gathers only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertstream.trainer.data.masking import Masker, restore
from bertstream.trainer.data.refs import ShardRef
from bertstream.trainer.data.shards import Block, Ragged
from bertstream.trainer.unpad import plan

PAD_MULTIPLE = 8


@dataclass(slots=True)
class Piece:
    """Rows ``rows`` of ``block`` go to batch slots ``slots``."""

    ref: ShardRef
    block: Block
    rows: np.ndarray  # [k] int64
    slots: np.ndarray  # [k] int64


# A batch travels as ONE flat int64 buffer: a DataLoader worker then hands over one shared-memory
# storage per batch instead of eight (per-tensor IPC, not collation, bounds multi-worker throughput).
# Fields in buffer order, with their widths: T (padded length), P (most masked positions) or 1.
LAYOUT = (
    ("input_ids", "T"),
    ("token_type_ids", "T"),
    ("attention_mask", "T"),
    ("masked_lm_positions", "P"),
    ("masked_lm_ids", "P"),
    ("masked_lm_weights", "P"),
    ("next_sentence_labels", 1),
    ("instance_ids", 1),
)
Shape = tuple[int, int, int]  # (B, T, P)


@dataclass(frozen=True, slots=True)
class Counts:
    """What a batch holds, counted on the host where it is built (a DataLoader worker), as plain numbers: the
    training loop normalises its losses by them without reading a tensor back from the device."""

    masked: int  # masked tokens with weight 1 (the MLM loss's targets)
    sequences: int
    tokens: int  # real tokens (the attention mask's ones)
    lengths: tuple[int, ...] = ()  # each sequence's real tokens: a step's FLOPs (attention is quadratic in them)

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.masked + other.masked,
            self.sequences + other.sequences,
            self.tokens + other.tokens,
            self.lengths + other.lengths,
        )


class Batch(dict):
    """A batch's tensors by name (a dict, as the model takes it) and its :class:`Counts` beside them."""

    __slots__ = ("counts",)

    def __init__(self, tensors: dict[str, torch.Tensor], counts: Counts) -> None:
        super().__init__(tensors)
        self.counts = counts


def count(flat: np.ndarray, shape: Shape) -> Counts:
    """The :class:`Counts` of a packed batch (numpy: read where it was collated, no tensor involved)."""
    f = _views(flat, shape)
    lengths = tuple(int(n) for n in f["attention_mask"].sum(1))
    return Counts(int(f["masked_lm_weights"].sum()), shape[0], sum(lengths), lengths)


def collate(pieces: Sequence[Piece], batch_size: int, pad_id: int, vocab_size: int) -> dict[str, np.ndarray]:
    """Padded numpy batch (views of the packed buffer); see :func:`collate_packed`."""
    flat, shape = collate_packed(pieces, batch_size, pad_id, vocab_size)
    return {k: v.numpy() for k, v in unpack(torch.from_numpy(flat), shape).items()}


def collate_packed(
    pieces: Sequence[Piece],
    batch_size: int,
    pad_id: int,
    vocab_size: int,
    masker: Masker | None = None,
    epoch: int | np.ndarray = 0,
) -> tuple[np.ndarray, Shape]:
    """The batch as one flat int64 buffer laid out as :data:`LAYOUT`, and its ``(B, T, P)``.

    T = longest sequence rounded up to a multiple of 8; P = most masked positions in the batch.
    With a ``masker``, the shards' static masks are undone and the batch is masked afresh for ``epoch``.
    """
    if masker is not None:
        return _remask(*collate_packed(pieces, batch_size, pad_id, vocab_size), masker, epoch)
    b = batch_size
    lengths = np.empty(b, np.int64)
    masked = np.empty(b, np.int64)
    seg_a = np.empty(b, np.int64)
    for p in pieces:
        lengths[p.slots] = p.block.input_ids.lengths[p.rows]
        masked[p.slots] = p.block.masked_positions.lengths[p.rows]
        seg_a[p.slots] = p.block.segment_a[p.rows]
    t = -(-int(lengths.max()) // PAD_MULTIPLE) * PAD_MULTIPLE
    n_masked = int(masked.max())
    flat = np.empty(3 * b * t + 3 * b * n_masked + 2 * b, np.int64)
    f = _views(flat, (b, t, n_masked))
    for p in pieces:
        _fill(f["input_ids"], p.slots, p.block.input_ids, p.rows, pad_id)
        _fill(f["masked_lm_positions"], p.slots, p.block.masked_positions, p.rows, 0)
        _fill(f["masked_lm_ids"], p.slots, p.block.masked_ids, p.rows, 0)
        f["next_sentence_labels"][p.slots] = p.block.nsp[p.rows]
        f["instance_ids"][p.slots] = p.block.instance_id[p.rows].view(np.int64)
    col = np.arange(t)
    real = col < lengths[:, None]  # [B, T]
    weights = np.arange(n_masked) < masked[:, None]  # [B, P]
    np.logical_and(col >= seg_a[:, None], real, out=f["token_type_ids"], casting="unsafe")
    f["attention_mask"][...] = real
    f["masked_lm_weights"][...] = weights
    _check(pieces, f["input_ids"], f["masked_lm_positions"], f["masked_lm_ids"], weights, lengths, vocab_size)
    return flat, (b, t, n_masked)


def _remask(flat: np.ndarray, shape: Shape, masker: Masker, epoch: int | np.ndarray) -> tuple[np.ndarray, Shape]:
    """A checked static batch -> the same rows with dynamic masks (P changes with the draws)."""
    b, t, _ = shape
    f = _views(flat, shape)
    lengths = f["attention_mask"].sum(axis=1)  # [B]
    seg_a = lengths - f["token_type_ids"].sum(axis=1)  # [B] tokens of [CLS] A [SEP] (type 1 is the rest)
    original = restore(f["input_ids"], f["masked_lm_positions"], f["masked_lm_ids"], f["masked_lm_weights"] != 0)
    m = masker.mask(original, lengths, seg_a, f["instance_ids"].view(np.uint64), epoch)
    p = m.positions.shape[1]
    out = np.empty(3 * b * t + 3 * b * p + 2 * b, np.int64)
    g = _views(out, (b, t, p))
    g["input_ids"][...] = m.input_ids
    g["masked_lm_positions"][...] = m.positions
    g["masked_lm_ids"][...] = m.labels
    g["masked_lm_weights"][...] = np.arange(p)[None, :] < m.counts[:, None]
    for name in ("token_type_ids", "attention_mask", "next_sentence_labels", "instance_ids"):
        g[name][...] = f[name]
    return out, (b, t, p)


def unpack(flat: torch.Tensor, shape: Shape) -> dict[str, torch.Tensor]:
    """Views of a packed batch; ``masked_lm_weights`` becomes float32 (its only copy). The unpadded layout's
    index tensors (``trainer.unpad.plan``) are added here, on the host, so the step never reads N back from
    the device."""
    out = _views(flat, shape)
    made = {"masked_lm_weights": out["masked_lm_weights"].to(torch.float32), **plan(out["attention_mask"])}
    for k, v in made.items():
        out[k] = v.pin_memory() if flat.is_pinned() else v  # keep H2D copies async
    return out


def _views(flat: np.ndarray | torch.Tensor, shape: Shape) -> dict:
    b, t, p = shape
    width = {"T": t, "P": p, 1: 1}
    out, at = {}, 0
    for name, w in LAYOUT:
        n = b * width[w]
        out[name] = flat[at : at + n].reshape(b, width[w]) if w != 1 else flat[at : at + n]
        at += n
    return out


def _fill(out: np.ndarray, slots: np.ndarray, src: Ragged, rows: np.ndarray, fill: int) -> None:
    """``out[slots[i]] = row rows[i] of src``, padded with ``fill``.

    A rectangular gather (every row read to the full width, then the tail masked) beats building
    ragged index lists with ``np.repeat`` because most rows are close to the batch width. Reads past a
    row's end stay inside ``values`` (``clip``) and are masked; open_shard checked that rows lie inside.
    """
    width = out.shape[1]
    if width == 0 or len(rows) == 0:
        return
    if len(src.values) == 0:  # every row of this block is empty (e.g. nothing masked)
        out[slots] = fill
        return
    col = np.arange(width)
    vals = np.take(src.values, src.starts[rows][:, None] + col, mode="clip")  # [k, width]
    np.putmask(vals, col >= src.lengths[rows][:, None], fill)
    out[slots] = vals


def _check(
    pieces: Sequence[Piece],
    input_ids: np.ndarray,
    positions: np.ndarray,
    masked_ids: np.ndarray,
    weights: np.ndarray,
    lengths: np.ndarray,
    vocab_size: int,
) -> None:
    """Catch writer bugs that would otherwise train silently on garbage (costs two reductions)."""
    bad_pos = weights & (positions >= lengths[:, None])
    out_of_vocab = (
        int(input_ids.max(initial=0)) >= vocab_size
        or int(masked_ids.max(initial=0)) >= vocab_size
        or int(input_ids.min(initial=0)) < 0
        or int(masked_ids.min(initial=0)) < 0
    )
    if not bad_pos.any() and not out_of_vocab:
        return
    rows = np.flatnonzero(
        bad_pos.any(axis=1)
        | ((input_ids >= vocab_size) | (input_ids < 0)).any(axis=1)
        | ((masked_ids >= vocab_size) | (masked_ids < 0)).any(axis=1)
    )
    slot = int(rows[0])
    p = next(p for p in pieces if slot in p.slots)
    iid = int(p.block.instance_id[p.rows[np.flatnonzero(p.slots == slot)[0]]])
    what = "a masked position past its length" if bad_pos[slot].any() else f"an id outside 0..{vocab_size - 1}"
    raise p.ref.error(f"instance {iid:016x} has {what}")
