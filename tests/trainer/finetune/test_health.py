"""A fine-tuning run that learned nothing ends with one ``warning:`` line naming ``--lr`` (and results.json keeps
it); a run that learned ends without one. Tiny real runs on the shared SST-2 and CoNLL subsets."""

from __future__ import annotations

import json

from bertstream.schemas import tasks as T
from bertstream.trainer.finetune.health import finetune_warning, flat_eval_loss
from tests.trainer.finetune.conftest import finetune_run


def _warning_lines(capfd) -> list[str]:
    return [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]


def test_bert_base_rate_on_tiny_collapses_to_one_class_and_says_so(sst2, tmp_path, capfd):
    # README's step 5 as it was: BERT-base's 5e-5 on a tiny model predicts one class for every dev row
    results = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "ft", lr=5e-5)
    lines = _warning_lines(capfd)
    assert len(lines) == 1, lines
    assert "all 200 dev predictions of the best epoch are" in lines[0] and "(one class)" in lines[0]
    assert "--lr 3e-4" in lines[0] and "this run used 5e-5" in lines[0]  # tiny's rate (hidden 128)
    saved = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert saved["warnings"] == results["warnings"] == [lines[0].split("] ", 1)[1]]


def test_ner_all_o_is_one_class_and_a_run_that_learns_ends_without_a_warning(conll, tmp_path, capfd):
    # one epoch at 1e-3: every word 'O' (the majority); three: entities found, the eval loss falls ~11%
    results = finetune_run(T.NER, conll["train"], conll["valid"], tmp_path / "ner", lr=1e-3)
    (line,) = _warning_lines(capfd)
    assert "dev predictions of the best epoch are 'O' (one class)" in line and "--lr" in line
    assert results["warnings"] == [line.split("] ", 1)[1]]
    results = finetune_run(T.NER, conll["train"], conll["valid"], tmp_path / "ner3", lr=1e-3, epochs=3)
    assert results["warnings"] == [] and _warning_lines(capfd) == []
    assert "one_class" not in results["epochs"][-1] and results["best"]["value"] > 0


def test_flat_eval_loss_rule():
    assert flat_eval_loss([0.6931, 0.6925, 0.6940])  # within 1% of the first
    assert not flat_eval_loss([0.6931, 0.60])  # moved
    assert not flat_eval_loss([0.6931])  # one epoch: nothing to compare
    results = {
        "epochs": [{"epoch": e, "eval": {"loss": 0.69, "accuracy": 0.6}} for e in (1, 2, 3)],
        "best": {"epoch": 1},
    }
    line = finetune_warning(results, 5e-5, 768)
    assert line is not None and line.startswith("warning: the eval loss did not move over 3 epochs")
    assert "this run used --lr 5e-5 (the rate for hidden size 768 is 5e-5)" in line  # base: its own rate
    results["epochs"][1]["eval"]["loss"] = 0.5
    assert finetune_warning(results, 5e-5, 768) is None
    results["epochs"][2]["one_class"] = ["O", 3101]  # collapsed at the end, after a better epoch 1
    assert "all 3101 dev predictions of the last epoch are 'O'" in finetune_warning(results, 1e-3, 128)
