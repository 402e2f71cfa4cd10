"""Pretraining evaluation: the masked-LM perplexity beside its loss, and the whole eval set by default (a
``--eval-batches`` subset said as one)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from bertstream.trainer.cli import main
from bertstream.trainer.metrics import read_metrics
from bertstream.trainer.pretrain.evaluation import perplexity


def _run(demo_shards, out, *extra: str):
    args = ["pretrain", "--data", str(demo_shards), "--eval-data", str(demo_shards), "--output", str(out)]
    args += ["--batch-size", "8", "--max-steps", "2", "--eval-every", "2", "--warmup-steps", "1"]
    args += ["--num-workers", "0", "--no-tensorboard", "--log-every", "1", *extra]
    result = CliRunner().invoke(main, args, prog_name="berttrain")
    assert result.exit_code == 0, result.output
    (record,) = [r for r in read_metrics(out) if r.get("split") == "eval"]
    return record, result.output


def test_eval_reads_the_whole_eval_set_and_reports_perplexity_per_masked_token(demo_shards, tmp_path):
    record, output = _run(demo_shards, tmp_path / "run")
    held = record["eval_instances"]
    assert held > 50 * 8  # more than the old default of 50 batches read
    assert held - 8 < record["instances"] <= held  # all of it, but a remainder smaller than one batch
    assert record["mlm_perplexity"] == pytest.approx(math.exp(record["mlm_loss"]), rel=1e-5)
    train = [r for r in read_metrics(tmp_path / "run") if r.get("split", "train") == "train"]
    assert train[-1]["mlm_perplexity"] == pytest.approx(math.exp(train[-1]["mlm_loss"]), rel=1e-5)
    left = held - record["instances"]
    extent = f"all {held:,} held-out instances" if not left else f"{record['instances']:,} of {held:,} held-out"
    assert f"(per masked token) over {extent}" in output
    # the command's last line: the last evaluation's loss and perplexity
    assert f"perplexity {record['mlm_perplexity']:.2f} per masked token)" in output.strip().splitlines()[-1]


def test_an_eval_batches_subset_is_said_as_one(demo_shards, tmp_path):
    record, output = _run(demo_shards, tmp_path / "run", "--eval-batches", "3")
    assert record["instances"] == 3 * 8
    assert f"over 24 of {record['eval_instances']:,} held-out instances, a subset (--eval-batches 3; 0 reads all)" in (
        output
    )


def test_perplexity_is_exp_of_the_loss_and_never_overflows():
    assert perplexity(0.0) == 1.0
    assert perplexity(math.log(30522)) == pytest.approx(30522)
    assert math.isfinite(perplexity(1e6))


def test_every_evaluation_setting_typed_without_eval_data_is_refused(tmp_path):
    # the settings are those declared with the EVALUATION tag (trainer/config.py), not a list kept in the command
    from bertstream.cli import options
    from bertstream.trainer.config import TrainConfig

    settings = options.tagged(TrainConfig, options.EVALUATION)
    assert "eval_batches" in settings and "eval_every" in settings
    base = ["pretrain", "--data", str(tmp_path / "ds"), "--output", str(tmp_path / "run")]
    flags = [options.flag_for(TrainConfig, name) for name in settings]
    for typed in [[f] for f in flags] + [flags]:
        result = CliRunner().invoke(main, [*base, *(x for f in typed for x in (f, "1"))], prog_name="berttrain")
        assert result.exit_code == 2
        assert f"Error: {' and '.join(typed)} without --eval-data: there is nothing to evaluate" in result.output
    assert not (tmp_path / "run").exists()
