"""The report's PNG plots (matplotlib, Agg backend: no display needed), one function per picture."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

COLOR = "#3b6ea8"
DPI = 100


@dataclass(frozen=True, slots=True)
class Figure:
    file: str  # relative to the report folder
    title: str
    caption: str
    wide: bool = False  # spans the page's columns


def _save(fig, out_dir: str, file: str) -> None:
    with warnings.catch_warnings():
        # Vocabulary entries in scripts DejaVu lacks (CJK, emoji) show as boxes; the HTML tables show them.
        # tight_layout draws the text too: outside this block it warned once a glyph (29 lines on Chinese data).
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, file), dpi=DPI)
    plt.close(fig)


def _empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def _hbars(ax, rows: Sequence[tuple[str, float]], xlabel: str, fmt: str = "{:,.0f}") -> None:
    if not rows:
        _empty(ax, "nothing recorded")
        return
    labels = [r[0] if len(r[0]) <= 28 else r[0][:27] + "…" for r in rows]
    values = [r[1] for r in rows]
    y = range(len(rows))
    ax.barh(y, values, color=COLOR)
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()  # largest first, at the top
    ax.set_xlabel(xlabel)
    top = max(values) or 1
    for i, v in enumerate(values):
        ax.text(v + top * 0.01, i, fmt.format(v), va="center", fontsize=8)
    ax.set_xlim(0, top * 1.18)
    counts = fmt == "{:,.0f}"
    ax.xaxis.set_major_locator(MaxNLocator(4, integer=counts))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if counts else f"{v:g}"))


def _histogram(ax, hist: Sequence[int], xlabel: str, mark: int | None = None, log: bool = False) -> None:
    if not sum(hist):
        _empty(ax, "no instances")
        return
    ax.bar(range(len(hist)), hist, width=1.0, color=COLOR)
    if log:
        ax.set_yscale("log")  # the full-length peak would flatten the short instances to nothing
    if mark is not None:
        ax.axvline(mark, color="#c0392b", linestyle="--", linewidth=1, label=f"max_seq_length {mark}")
        ax.legend(loc="upper left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("instances (log scale)" if log else "instances")


def lengths(series: dict[str, Any], out_dir: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    _histogram(
        ax,
        series["length_histogram"],
        "instance length (tokens, [CLS] and [SEP]s included)",
        series.get("max_seq_length"),
        log=True,
    )
    _save(fig, out_dir, "lengths.png")
    return Figure(
        "lengths.png", "Instance lengths", "Most instances fill max_seq_length; short_seq_prob makes the rest."
    )


def next_sentence(series: dict[str, Any], out_dir: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 2.4))
    _hbars(ax, series["next_sentence"], "instances")
    _save(fig, out_dir, "next_sentence.png")
    return Figure("next_sentence.png", "Next-sentence balance", "BERT aims at half IsNext, half NotNext.")


def predictions(series: dict[str, Any], out_dir: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    _histogram(ax, series["predictions_histogram"], "masked-LM predictions per instance")
    _save(fig, out_dir, "predictions.png")
    return Figure("predictions.png", "Predictions per instance", "round(length × masked_lm_prob), at most the cap.")


def sources(series: dict[str, Any], out_dir: str) -> Figure:
    rows = max(len(series["source_documents"]), 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12.8, 1.2 + 0.3 * rows))
    _hbars(a, series["source_documents"], "documents")
    _hbars(b, series["source_tokens"], "tokens")
    _save(fig, out_dir, "sources.png")
    return Figure(
        "sources.png",
        "Documents and tokens per input source",
        "A source is the first folder (or file) of an input below the inputs' common folder; largest first.",
        wide=True,
    )


def drops(series: dict[str, Any], out_dir: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 1.0 + 0.35 * max(len(series["drops"]), 1)))
    _hbars(ax, series["drops"], "documents dropped")
    _save(fig, out_dir, "drops.png")
    return Figure("drops.png", "Documents dropped, by reason", "Every dropped document is counted under its reason.")


def unk_rate(series: dict[str, Any], out_dir: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 1.0 + 0.3 * max(len(series["source_unk_rate"]), 1)))
    _hbars(ax, series["source_unk_rate"], "[UNK] tokens, % of the source's tokens", fmt="{:.3f}%")
    _save(fig, out_dir, "unk_rate.png")
    return Figure(
        "unk_rate.png",
        "[UNK] rate per source",
        "A high rate says the vocabulary does not fit the text; the words it lacks are listed above.",
    )


def top_tokens(series: dict[str, Any], out_dir: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6.4, 1.0 + 0.25 * max(len(series["top_tokens"]), 1)))
    _hbars(ax, series["top_tokens"], "occurrences in the instances (before masking)")
    _save(fig, out_dir, "top_tokens.png")
    return Figure("top_tokens.png", "Most frequent tokens", "Counted over every instance; [CLS] and [SEP] left out.")


PLOTS = (lengths, next_sentence, predictions, drops, sources, unk_rate, top_tokens)


def draw_all(series: dict[str, Any], out_dir: str) -> list[Figure]:
    return [plot(series, out_dir) for plot in PLOTS]
