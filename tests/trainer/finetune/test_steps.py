"""Fine-tuning's step features as Hugging Face users know them: ``--grad-accum`` (the run of the larger batch),
``--eval-every`` (evaluations inside an epoch), ``--patience`` (early stopping on the dev metric, said in the log
and results.json), ``--lr-schedule cosine``."""

from __future__ import annotations

import json

import pytest

from bertstream.schemas import tasks as T
from bertstream.trainer.errors import RunError
from bertstream.trainer.finetune.data import TaskDataError
from bertstream.trainer.finetune.evaluation import stopped_early
from bertstream.trainer.metrics import read_metrics
from bertstream.trainer.optim.schedule import WarmupLinearDecay
from tests.trainer.finetune.conftest import finetune_run

QUIET = {"dropout": 0.0, "log_every": 1}  # no dropout: two half batches give the whole batch's gradient


def _train_losses(run) -> list[float]:
    return [r["loss"] for r in read_metrics(run) if r.get("split", "train") == "train"]


def test_grad_accum_two_half_batches_train_as_the_whole_batch(sst2, tmp_path):
    whole = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "b16", max_steps=5, **QUIET)
    halves = finetune_run(
        T.CLASSIFICATION,
        sst2["train"],
        sst2["dev"],
        tmp_path / "b8x2",
        max_steps=5,
        batch_size=8,
        grad_accum=2,
        **QUIET,
    )
    assert halves["steps_per_epoch"] == whole["steps_per_epoch"] == 20  # 320 rows: 20 steps of 16 rows either way
    assert _train_losses(tmp_path / "b8x2") == pytest.approx(_train_losses(tmp_path / "b16"), abs=2e-5)
    assert halves["best"]["value"] == whole["best"]["value"]
    # an odd count: 320 rows in batches of 16, 3 to a step, is 7 steps an epoch (the last of 2 batches)
    odd = finetune_run(
        T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "b16x3", epochs=1, grad_accum=3, **QUIET
    )
    assert odd["steps_per_epoch"] == odd["total_steps"] == 7 and odd["best"]["step"] == 7


def test_eval_every_evaluates_inside_the_epoch_and_keeps_the_best_of_all(sst2, tmp_path, capfd):
    results = finetune_run(
        T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "run", epochs=1, eval_every=6, lr=2e-3
    )
    assert [e["step"] for e in results["evaluations"]] == [6, 12, 18] and results["epochs"][0]["step"] == 20
    evals = [r for r in read_metrics(tmp_path / "run") if r.get("split") == "eval"]
    assert [r["step"] for r in evals] == [6, 12, 18, 20]
    assert "step 6 (epoch 1, --eval-every 6): eval accuracy" in capfd.readouterr().err
    every = [*results["evaluations"], *results["epochs"]]
    best = max(every, key=lambda e: e["eval"]["accuracy"])  # the first of the highest
    assert results["best"]["step"] == best["step"] and results["best"]["value"] == best["eval"]["accuracy"]
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    assert on_disk["best"]["checkpoint"].endswith(f"step-{best['step']:07d}")


def test_patience_stops_on_a_flat_dev_metric_inside_an_epoch(sst2, tmp_path, capfd):
    # a rate too small to move the predictions: the accuracy of step 2 is never beaten
    results = finetune_run(
        T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "run", epochs=2, eval_every=2, patience=2, lr=1e-9
    )
    assert results["early_stopping"] == {"patience": 2, "stopped": True, "step": 6, "epoch": 1}
    assert [e["step"] for e in results["evaluations"]] == [2, 4, 6] and results["epochs"] == []
    assert results["best"]["step"] == 2
    assert max(r["step"] for r in read_metrics(tmp_path / "run")) == 6  # no step trained after the stop
    err = capfd.readouterr().err
    assert "early stop at step 6 (epoch 1): accuracy not above" in err and "in 2 evaluations (--patience 2)" in err
    assert json.loads((tmp_path / "run" / "results.json").read_text())["early_stopping"]["stopped"] is True
    # the command's last line, from the same record (finetune.evaluation owns early stopping's words)
    assert stopped_early(results) == "stopped early at step 6 (--patience 2); "
    assert stopped_early({"early_stopping": {"patience": 0, "stopped": False}}) == ""


def test_patience_at_epoch_ends_and_a_resume_of_the_stopped_run_trains_nothing(sst2, tmp_path):
    kw = {"epochs": 4, "patience": 1, "lr": 1e-9, "resume": "auto", "max_steps": 0}
    first = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "run", **kw)
    assert first["early_stopping"] == {"patience": 1, "stopped": True, "step": 40, "epoch": 2}
    assert [e["epoch"] for e in first["epochs"]] == [1, 2]
    again = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "run", **kw)
    assert again["epochs"] == first["epochs"] and again["early_stopping"] == first["early_stopping"]
    with pytest.raises(RunError, match=r"--patience 3 \(the run has 1\)"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "run", **{**kw, "patience": 3})


def test_patience_needs_labeled_eval_data(sst2, tmp_path):
    with pytest.raises(TaskDataError, match=r"--patience 2 stops on the dev metric, but --eval-data .* has no labels"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["test"], tmp_path / "run", patience=2)


def test_finetune_takes_the_cosine_schedule(sst2, tmp_path):
    results = finetune_run(
        T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "run", lr_schedule="cosine", **QUIET
    )
    lrs = [r["lr"] for r in read_metrics(tmp_path / "run") if r.get("split", "train") == "train"]
    want = [1e-3 * WarmupLinearDecay(2, 20, "cosine")(s) for s in range(1, 21)]  # warm-up: 10% of 20 steps
    assert results["config"]["optim"]["lr_schedule"] == "cosine" and lrs == pytest.approx(want, abs=1e-6)
