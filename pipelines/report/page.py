"""``bertprep report``: collect a pretraining dataset's numbers (:mod:`bertstream.pipelines.report.data`), draw its plots
(:mod:`bertstream.pipelines.report.plots`) and write ``index.html`` (:mod:`bertstream.pipelines.report.html`)."""

from __future__ import annotations

import os
from pathlib import Path

from bertstream.cli.owned import check_owned, publish
from bertstream.pipelines.common.dataset import load_manifest
from bertstream.pipelines.report.data import REPORT_DIR, ReportConfig, collect, count_tokens
from bertstream.pipelines.report.inspection import DatasetError, load_vocab
from bertstream.schemas import pretraining as P

INDEX = "index.html"
MARKER = ".bertprep-report"  # what tells a report folder from a user's folder of the same names


def write_report(dataset_dir: str, output_dir: str | None = None, cfg: ReportConfig | None = None) -> str:
    """Write the report of a pretraining dataset folder; return the path of its ``index.html``."""
    from bertstream.pipelines.report import html as report_html
    from bertstream.pipelines.report import plots as report_plots

    cfg = cfg or ReportConfig()
    out = output_dir or os.path.join(dataset_dir, REPORT_DIR)
    if "://" in out:
        raise DatasetError(f"{out}: the report is written to a local folder (give one with --output)")
    if output_dir is None:
        check_inside(dataset_dir, out)
    check_report_folder(out)
    manifest = load_manifest(dataset_dir)
    if manifest.kind != P.KIND:
        raise DatasetError(f"{dataset_dir}: a {manifest.kind!r} dataset; the report describes pretraining datasets")
    vocab = load_vocab(dataset_dir, manifest)
    tokens = count_tokens(dataset_dir, manifest, len(vocab))
    name = os.path.basename(os.path.abspath(dataset_dir).rstrip("/")) if "://" not in dataset_dir else dataset_dir
    data = collect(manifest, vocab, tokens, cfg, name)

    def write(folder: Path) -> None:
        figures = report_plots.draw_all(data.series, str(folder))
        (folder / INDEX).write_text(report_html.render(data, figures), encoding="utf-8")

    publish(Path(out), write, marker=MARKER)
    return os.path.join(out, INDEX)


def check_inside(dataset_dir: str, out: str) -> None:
    """``DIR/report`` stays in the dataset's folder: a link there to another folder (someone's site) was followed
    and its page overwritten. Refused, as a manifest's or a shard's link out of the folder is."""
    real, base = os.path.realpath(out), os.path.realpath(dataset_dir)
    if os.path.islink(out) or not (real == base or real.startswith(base.rstrip(os.sep) + os.sep)):
        raise DatasetError(
            f"{out}: a link out of the dataset folder (to {real}); the report is not written through it "
            "(give the folder with --output)"
        )


def check_report_folder(out: str) -> None:
    """A report replaces only a report: a folder holding anything else (a user's site) is refused, and so is an
    ``index.html`` and figures that no ``bertprep report`` marked as its own (an unmarked ``DIR/report`` too:
    someone's ``index.html`` is not taken for an earlier report)."""
    check_owned(
        Path(out),
        lambda name: name == INDEX or name.endswith(".png"),
        overwrite=None,
        what="a bertprep report",
        marker=MARKER,
    )
