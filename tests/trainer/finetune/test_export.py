"""A fine-tuning run leaves: ``berttrain export-hf RUN OUT`` writes its best checkpoint as
``BertForSequenceClassification``; ``transformers.pipeline("text-classification")`` on the export gives the run's
``predictions.tsv`` labels on the whole dev set, and ``berttrain finetune --init OUT`` continues from it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertstream.schemas import tasks as T
from bertstream.trainer.cli import main
from tests.trainer.finetune.conftest import finetune_run

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def test_an_exported_sst2_run_serves_its_predictions_and_is_an_init(sst2, tmp_path):
    run, hf = tmp_path / "run", tmp_path / "hf"
    finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], run, epochs=3, lr=3e-3)
    result = CliRunner().invoke(main, ["export-hf", str(run), str(hf)])
    assert result.exit_code == 0, result.output
    config = json.loads((hf / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "0", "1": "1"} and config["problem_type"] == "single_label_classification"
    assert json.loads((hf / "tokenizer_config.json").read_text())["do_lower_case"] is True  # the data was uncased

    header, *rows = (run / "predictions.tsv").read_text(encoding="utf-8").splitlines()
    assert header.split("\t")[2:4] == ["line", "prediction"]
    src = (sst2["dev"].parent / "dev.tsv").read_text(encoding="utf-8").splitlines()
    texts = [src[int(r.split("\t")[2]) - 1].rsplit("\t", 1)[0] for r in rows]
    ours = [r.split("\t")[3] for r in rows]
    pipe = transformers.pipeline("text-classification", model=str(hf))
    served = [p["label"] for p in pipe(texts, truncation=True, max_length=64, batch_size=32)]
    assert len(served) == 200 and served == ours
    assert len(set(ours)) == 2  # both labels predicted: the comparison is not of one constant

    again = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "again", init=str(hf), max_steps=2)
    assert again["init"]["kind"] == "hf"
    notes = again["init"]["notes"]
    assert any("task head of BertForSequenceClassification not reused" in n for n in notes), notes
