"""A fine-tuning run leaves: ``berttrain export-hf RUN OUT`` writes its best checkpoint as
``BertForSequenceClassification``; ``transformers.pipeline("text-classification")`` on the export gives the run's
``predictions.tsv`` labels on the whole dev set, and ``berttrain finetune --init OUT`` continues from it; a CoNLL
run's export tags as its ``predictions.conll`` in the token-classification pipeline."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertstream.schemas import tasks as T
from bertstream.trainer.cli import main
from tests.trainer.finetune.conftest import finetune_run

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def test_an_exported_sst2_run_serves_its_predictions_and_is_an_init(sst2, tmp_path, capfd):
    run, hf = tmp_path / "run", tmp_path / "hf"
    finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], run, epochs=3, lr=3e-3)
    result = CliRunner().invoke(main, ["export-hf", str(run), str(hf)])
    assert result.exit_code == 0, result.output
    config = json.loads((hf / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "0", "1": "1"} and config["problem_type"] == "single_label_classification"
    assert json.loads((hf / "tokenizer_config.json").read_text())["do_lower_case"] is True  # the data was uncased

    header, *rows = (run / "predictions.tsv").read_text(encoding="utf-8").splitlines()
    assert header.split("\t")[1:3] == ["line", "prediction"]
    src = (sst2["dev"].parent / "dev.tsv").read_text(encoding="utf-8").splitlines()
    texts = [src[int(r.split("\t")[1]) - 1].rsplit("\t", 1)[0] for r in rows]
    ours = [r.split("\t")[2] for r in rows]
    pipe = transformers.pipeline("text-classification", model=str(hf))
    served = [p["label"] for p in pipe(texts, truncation=True, max_length=64, batch_size=32)]
    assert len(served) == 200 and served == ours
    assert len(set(ours)) == 2  # both labels predicted: the comparison is not of one constant

    # --init the export, same task and labels: the head is reused, so a run that does not move the weights
    # (one step at a negligible rate) predicts what the exported run did, row for row
    again = finetune_run(
        T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "again", init=str(hf), max_steps=1, lr=1e-12
    )
    assert again["init"]["kind"] == "hf"
    assert "task head reused from the initial weights (classification, 2 labels)" in capfd.readouterr().err
    assert (tmp_path / "again" / "predictions.tsv").read_text() == (run / "predictions.tsv").read_text()


def test_an_exported_conll_tagger_gives_the_runs_entities(conll, tmp_path):
    """The token-classification pipeline (``aggregation_strategy="first"``) on real CoNLL-2003 validation
    sentences gives the entities of the run's ``predictions.conll``: every sentence that is one window of the
    run's data (<= 22 sub-tokens) and whose words are each one pre-token (the pipeline splits ``U.S.``)."""
    from bertstream.trainer.finetune import metrics as M
    from bertstream.trainer.finetune.tasks import HF_HEADS
    from bertstream.trainer.hf.export import export_checkpoint

    run, hf = tmp_path / "run", tmp_path / "hf"
    # one step: the head is still near its random init, so the run tags many entities of every type (a tiny
    # model trained for seconds tags all O, and equal lists of nothing would prove nothing)
    finetune_run(T.NER, conll["train"], conll["valid"], run, max_steps=1, lr=1e-5)
    export_checkpoint(run, hf, heads=HF_HEADS)
    pipe = transformers.pipeline("token-classification", model=str(hf), aggregation_strategy="first")
    pre = pipe.tokenizer.backend_tokenizer.pre_tokenizer
    compared = entities = 0
    for block in (run / "predictions.conll").read_text(encoding="utf-8").split("\n\n"):
        lines = [line.split(" ") for line in block.splitlines() if line]
        words, tags = [w for w, _, _ in lines], [p for _, _, p in lines]
        text = " ".join(words)
        if not words or len(pipe.tokenizer(text)["input_ids"]) > 24:
            continue
        if any(len(pre.pre_tokenize_str(w)) != 1 for w in words):
            continue
        expected = [(kind, " ".join(words[s : e + 1])) for kind, s, e in M.chunks(tags)]
        assert [(e["entity_group"], text[e["start"] : e["end"]]) for e in pipe(text)] == expected, text
        compared, entities = compared + 1, entities + len(expected)
    assert compared >= 30 and entities >= 10, (compared, entities)
