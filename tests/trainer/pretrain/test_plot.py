"""``berttrain plot``: what it reads is what is meant, and it writes the file it names (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertstream.trainer.errors import RunError
from bertstream.trainer.pretrain.plot import plot_run

pytest.importorskip("matplotlib")


def run_dir(root: Path, lines: list[str]) -> Path:
    root.mkdir()
    (root / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return root


RECORDS = [json.dumps({"step": s, "mlm_loss": 9.0 - s, "mlm_accuracy": 0.01 * s}) for s in (1, 2, 3)]


def test_plot_writes_the_image_it_names_or_refuses_in_one_line(tmp_path: Path) -> None:
    run = run_dir(tmp_path / "run", RECORDS)
    assert plot_run(run).read_bytes()[:4] == b"\x89PNG" and (run / "curves.png").exists()
    folder = tmp_path / "ds"
    folder.mkdir()
    with pytest.raises(RunError, match=f"--output {folder} is a folder: give the image's file name"):
        plot_run(run, folder)  # wrote ds.png and said "wrote ds"
    with pytest.raises(RunError, match="plot.txt: name an image file ending in .png, .svg, .pdf"):
        plot_run(run, tmp_path / "plot.txt")  # matplotlib's traceback
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "run"]


def test_records_of_numbers_no_axis_can_hold_are_left_out_and_said(tmp_path: Path, capsys) -> None:
    # Round 7: a metrics.jsonl holding NaN, Infinity or 1e308 (json reads them) ended in matplotlib's
    # "ValueError: arange: cannot compute length" under a traceback.
    odd = [
        '{"step": 4, "mlm_loss": NaN, "mlm_accuracy": 0.1}',
        '{"step": 5, "mlm_loss": 1e308, "mlm_accuracy": Infinity}',
    ]
    run = run_dir(tmp_path / "run", [*RECORDS, *odd])
    assert plot_run(run).read_bytes()[:4] == b"\x89PNG"
    assert "2 records whose numbers are not finite, or past 1e+30, are left out of the plot (the first at step 4)" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_a_file_that_is_no_plot_is_not_replaced_and_a_plot_is(tmp_path: Path, suffix: str) -> None:
    # Round 7: `plot --output photo.png` replaced the user's own photo.png without a word (plot has no
    # --overwrite); a figure matplotlib drew (an earlier plot, curves.png of an earlier version) is replaced.
    run = run_dir(tmp_path / "run", RECORDS)
    mine = tmp_path / f"photo{suffix}"
    mine.write_bytes(b"\x89PNG\r\n\x1a\n a holiday photo")
    with pytest.raises(RunError, match=f"--output {mine} already exists and is no figure berttrain plot drew"):
        plot_run(run, mine)
    assert mine.read_bytes() == b"\x89PNG\r\n\x1a\n a holiday photo"
    out = tmp_path / f"curves{suffix}"
    plot_run(run, out)
    first = out.stat().st_mtime_ns
    plot_run(run, out)  # its own earlier figure: replaced
    assert out.stat().st_mtime_ns >= first and out.stat().st_size > 0


@pytest.mark.parametrize(
    "lines, message",
    [
        (["garbage"], "no record with step, mlm_loss and mlm_accuracy"),  # a torn last line: skipped, then nothing
        (['{"hello": 1}', '{"step": "x"}'], "no record with step, mlm_loss and mlm_accuracy"),
        (["[1, 2]", *RECORDS], "a line holds list, not a metrics record"),
    ],
)
def test_a_metrics_file_without_records_is_refused_not_plotted_empty(tmp_path: Path, lines, message) -> None:
    run = run_dir(tmp_path / "run", lines)
    with pytest.raises(RunError, match=message):
        plot_run(run)
    assert not (run / "curves.png").exists()


def test_a_metrics_file_of_binary_bytes_is_one_line(tmp_path: Path) -> None:
    # Round 8: random bytes in metrics.jsonl were a UnicodeDecodeError traceback in plot (and a resume)
    run = run_dir(tmp_path / "run", RECORDS)
    (run / "metrics.jsonl").write_bytes(b"\x92\xff" + bytes(range(256)))
    with pytest.raises(RunError, match=r"metrics.jsonl: not a metrics log \(byte 0 is not UTF-8 text\)"):
        plot_run(run)


def test_a_run_given_twice_is_refused(tmp_path: Path, monkeypatch) -> None:
    """Issue 44, new case: `plot RUN RUN` (or RUN and ./RUN) drew one run as two phases, its steps counted twice."""
    run = run_dir(tmp_path / "run", RECORDS)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunError, match=rf"{run} is given twice \(also as run\)"):
        plot_run(["run", str(run)], tmp_path / "two.png")
    assert not (tmp_path / "two.png").exists() and not (run / "curves.png").exists()


def test_the_unigram_baseline_counts_the_masked_tokens_of_every_instance(demo_shards: Path) -> None:
    # The baseline reads the dataset once whole (DataConfig.whole): every instance, in stream order, with the
    # shards' own masks; it is the mode's share of the masked tokens of that pass.
    import torch

    from bertstream.trainer.data import DataConfig, PretrainingLoader
    from bertstream.trainer.pretrain.plot import unigram_baseline

    whole = DataConfig.whole(str(demo_shards), 256)
    assert (whole.shuffle, whole.drop_remainder, whole.masking) == (False, False, "static")
    loader = PretrainingLoader(whole, expected_vocab_sha256=None)
    batches = [b for _, b in zip(range(loader.steps_per_epoch), loader)]
    assert len({int(i) for b in batches for i in b["instance_ids"]}) == loader.num_samples  # none left out
    ids = torch.cat([b["masked_lm_ids"][b["masked_lm_weights"] > 0] for b in batches])
    counts = torch.bincount(ids).double()
    assert unigram_baseline(str(demo_shards)) == pytest.approx(float(counts.max() / counts.sum()), abs=1e-12)
