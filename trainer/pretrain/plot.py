"""``berttrain plot``: training curves from ``metrics.jsonl`` as a PNG."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from bertstream.cli.options import single_option
from bertstream.cli.owned import output_file, output_option
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import METRICS_FILE, has_step, read_metrics

FORMATS = (".png", ".svg", ".pdf")
MAX_DRAWN = 1e30  # no loss, accuracy or step a run writes comes near it; 1e308 broke the axis' tick locator


def plot_options(command: Callable) -> Callable:
    """``berttrain plot``'s flags, declared here with what they mean (``trainer.cli`` wires the command): where the
    figure goes (:func:`output_path`) and the dataset of the baseline drawn (:func:`unigram_baseline`)."""
    command = single_option(
        "--baseline-from", help="Dataset folder: draw the unigram MLM accuracy baseline computed from it."
    )(command)
    return output_option("PNG path (default: the last RUN_DIR/curves.png).")(command)


def unigram_baseline(data_dir: str) -> float:
    """MLM accuracy of always predicting the most frequent masked token of ``data_dir`` (its own mode, so the
    baseline is, if anything, flattered)."""
    from bertstream.trainer.data import DataConfig, PretrainingLoader

    if not data_dir:  # "" drew no baseline without a word
        raise RunError("--baseline-from '' names no dataset folder")
    loader = PretrainingLoader(DataConfig.whole(data_dir, batch_size=256), expected_vocab_sha256=None)
    counts = torch.zeros(0, dtype=torch.float64)
    for batch in loader:
        ids = batch["masked_lm_ids"][batch["masked_lm_weights"] > 0]
        c = torch.bincount(ids).double()
        counts = torch.nn.functional.pad(counts, (0, max(0, len(c) - len(counts)))) + torch.nn.functional.pad(
            c, (0, max(0, len(counts) - len(c)))
        )
        if loader.batches_consumed == loader.steps_per_epoch:
            break
    return float(counts.max() / counts.sum())


def join_phases(runs: Sequence[Path]) -> tuple[list[dict], list[dict], list[int]]:
    """(train records, eval records, phase boundaries) of consecutive runs on one step axis: each run's steps
    are shifted by the last step of the runs before it."""
    if not runs:
        raise ValueError("plot needs at least one run folder")
    seen: dict[Path, Path] = {}
    for run in runs:  # the same run twice was drawn as two phases, its steps counted twice
        if (earlier := seen.setdefault(run.resolve(), run)) is not run:
            also = f" (also as {earlier})" if str(earlier) != str(run) else ""
            raise RunError(f"{run} is given twice{also}: each RUN_DIR is one phase of the training")
    train: list[dict] = []
    evals: list[dict] = []
    boundaries: list[int] = []
    offset = 0
    for i, run in enumerate(runs):
        read = [r for r in read_metrics(run) if _plottable(r, run)]
        records = [r for r in read if _drawable(r)]
        if len(records) < len(read):  # NaN, inf, 1e308: matplotlib's tick locator failed on them (a traceback)
            first = next(r["step"] for r in read if not _drawable(r))
            print(
                f"[berttrain] note: {run}/{METRICS_FILE}: {len(read) - len(records)} records whose numbers are not "
                f"finite, or past {MAX_DRAWN:g}, are left out of the plot (the first at step {first})",
                file=sys.stderr,
            )
        if not records:  # a garbage or foreign file: an empty figure would say the run learnt nothing
            raise RunError(f"{run}/{METRICS_FILE}: no record with step, mlm_loss and mlm_accuracy: nothing to plot")
        if i:
            boundaries.append(offset)
        for r in records:
            (evals if r.get("split") == "eval" else train).append({**r, "step": r["step"] + offset})
        offset += max((r["step"] for r in records), default=0)
    return train, evals, boundaries


def _plottable(record: object, run: Path) -> bool:
    """A metrics record with the plotted numbers (others, such as a run's summary line, are skipped)."""
    if not isinstance(record, dict):
        raise RunError(f"{run}/{METRICS_FILE}: a line holds {type(record).__name__}, not a metrics record")
    numbers = [record.get(k) for k in ("mlm_loss", "mlm_accuracy")]
    return has_step(record) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers)


def _drawable(record: dict) -> bool:
    """The step and every number drawn finite and at most ``MAX_DRAWN`` in size (what an axis can hold)."""
    keys = ("step", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")
    values = [record[k] for k in keys if isinstance(record.get(k), (int, float))]
    return all(math.isfinite(v) and abs(v) <= MAX_DRAWN for v in values)


def output_path(runs: Sequence[Path], output: str | Path | None) -> Path:
    """Where the figure goes: a file path whose suffix names a format matplotlib writes (a folder is refused:
    ``plot --output ds`` wrote ``ds.png`` and said "wrote ds"), replaced only when it is a figure drawn before
    (the policy and its words: ``bertstream.cli.owned.output_file``)."""
    return output_file(
        output,
        runs[-1] / "curves.png",
        suffixes=FORMATS,
        ours=_drawn_by_matplotlib,
        kind=("the image's file name", "an image file"),
        mine="figure berttrain plot drew (no matplotlib mark in it)",
        error=RunError,
    )


def _drawn_by_matplotlib(path: Path) -> bool:
    """A regular file bearing matplotlib's mark near its start or end (a PNG's ``Software`` text, an SVG's
    comment; a PDF's ``Producer``, in its trailer): an earlier plot, replaced; anything else is someone's file
    (``plot --output photo.png`` replaced it without a word)."""
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        head = f.read(4096)
        f.seek(max(0, path.stat().st_size - 4096))
        return b"matplotlib" in (head + f.read(4096)).lower()


def plot_run(
    run_dir: str | Path | Sequence[str | Path], output: str | Path | None = None, *, baseline: float | None = None
) -> Path:
    """Loss and accuracy curves of one run, or of the phases of one training (phase two resumed from phase
    one's checkpoint with ``--reset-optimizer``) drawn on one step axis: each phase's steps continue where the
    previous phase stopped, with a dotted line at the boundary. Written to ``output`` (default: the last run's
    ``curves.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [Path(run_dir)] if isinstance(run_dir, (str, Path)) else [Path(r) for r in run_dir]
    out = output_path(runs, output)
    train, evals, boundaries = join_phases(runs)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for rows, style, name in ((train, "-", "train"), (evals, "o-", "eval")):
        if not rows:
            continue
        steps = [r["step"] for r in rows]
        ax_loss.plot(steps, [r["mlm_loss"] for r in rows], style, label=f"{name} MLM loss", markersize=3)
        ax_acc.plot(steps, [r["mlm_accuracy"] for r in rows], style, label=f"{name} MLM accuracy", markersize=3)
        if "nsp_loss" not in rows[0]:  # an MLM-only run (--no-nsp)
            continue
        ax_loss.plot(steps, [r["nsp_loss"] for r in rows], style, label=f"{name} NSP loss", markersize=3, alpha=0.7)
        ax_acc.plot(
            steps, [r["nsp_accuracy"] for r in rows], style, label=f"{name} NSP accuracy", markersize=3, alpha=0.7
        )
    for ax in (ax_loss, ax_acc):
        for b in boundaries:
            ax.axvline(b, color="black", linestyle=":", linewidth=1)
    if baseline is not None:
        ax_acc.axhline(baseline, color="grey", linestyle="--", label=f"unigram baseline {baseline:.3f}")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_acc.set_xlabel("step")
    ax_acc.set_ylabel("accuracy")
    ax_loss.legend(fontsize=8)
    ax_acc.legend(fontsize=8)
    fig.suptitle(" -> ".join(r.name for r in runs))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
