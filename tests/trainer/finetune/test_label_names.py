"""``berttrain finetune --label-names 0=negative,1=positive``: the names an export's ``id2label``/``label2id`` give
the data's labels (SST-2's are '0' and '1'); the export stays a ``finetune --init`` whose head is reused."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertstream.cli.errors import UsageError
from bertstream.schemas import tasks as T
from bertstream.trainer.cli import main
from bertstream.trainer.finetune.config import FinetuneConfig, parse_label_names
from tests.trainer.finetune.conftest import finetune_run


def test_the_export_names_the_labels_and_its_head_is_reused(sst2, tmp_path, capfd):
    transformers = pytest.importorskip("transformers")
    run, hf = tmp_path / "run", tmp_path / "hf"
    results = finetune_run(
        T.CLASSIFICATION, sst2["train"], sst2["dev"], run, epochs=2, lr=3e-3, label_names="1=positive,0=negative"
    )
    assert results["task"]["labels"] == ["0", "1"] and results["task"]["label_names"] == ["negative", "positive"]
    result = CliRunner().invoke(main, ["export-hf", str(run), str(hf)])
    assert result.exit_code == 0, result.output
    config = json.loads((hf / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["label2id"] == {"negative": 0, "positive": 1} and config["bertstream_labels"] == ["0", "1"]
    header, *rows = (run / "predictions.tsv").read_text(encoding="utf-8").splitlines()
    src = (sst2["dev"].parent / "dev.tsv").read_text(encoding="utf-8").splitlines()
    texts = [src[int(r.split("\t")[1]) - 1].rsplit("\t", 1)[0] for r in rows[:40]]  # input, line, prediction, label
    named = {"0": "negative", "1": "positive"}
    pipe = transformers.pipeline("text-classification", model=str(hf))
    served = [p["label"] for p in pipe(texts, truncation=True, max_length=64)]
    assert served == [named[r.split("\t")[2]] for r in rows[:40]]  # the run's predictions, by name
    capfd.readouterr()
    finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "again", init=str(hf), max_steps=1)
    assert "task head reused from the initial weights (classification, 2 labels)" in capfd.readouterr().err


def test_without_label_names_the_recorded_label_set_names_them(sst2, tmp_path):
    results = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "run", max_steps=1)
    assert results["task"]["label_names"] == results["task"]["labels"] == ["0", "1"]


def test_bad_label_names_are_refused_on_the_flag(sst2, tmp_path):
    assert parse_label_names("0=neg, 1 = pos") == {"0": "neg", "1": "pos"}
    for text, why in (("0negative", "is no LABEL=NAME"), ("0=a,0=b", "names label '0' twice"), ("0=,1=b", "no LABEL")):
        with pytest.raises(UsageError, match=why):
            parse_label_names(text)
    base = {"task": "classification", "train_data": "t", "eval_data": "e", "init": "random:tiny", "output": "o"}
    with pytest.raises(UsageError, match="gives two labels one name"):
        FinetuneConfig.build(**base, label_names="0=x,1=x").display_names(("0", "1"))
    args = ["finetune", "--task", "classification", "--train-data", str(sst2["train"]), "--eval-data"]
    args += [str(sst2["dev"]), "--init", "random:tiny", "--output", str(tmp_path / "run"), "--no-tensorboard"]
    result = CliRunner().invoke(main, [*args, "--label-names", "2=neutral"])
    assert result.exit_code == 2 and result.output.splitlines()[-1] == (
        "Error: Invalid value for '--label-names': names '2', not labels of the task data (its labels: 0, 1)"
    )
    assert not (tmp_path / "run").exists()  # refused before the run folder was made
