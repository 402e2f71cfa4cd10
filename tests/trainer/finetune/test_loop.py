"""End to end on real data subsets: SST-2, CoNLL-2003, SQuAD v1.1 built by the pipelines, one quick epoch of a
tiny model on CPU; output formats, metrics on every eval row, clear errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file

from bertstream.cli.errors import UsageError
from bertstream.schemas import tasks as T
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab, VocabMismatchError
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.cli import main
from bertstream.trainer.errors import RunError
from bertstream.trainer.finetune import metrics as M
from bertstream.trainer.finetune.data import TaskDataError, load_task_data
from bertstream.trainer.finetune.tasks import get_task
from bertstream.trainer.metrics import read_metrics
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.model_config import bert_tiny
from tests.beam_services import free_port
from tests.processes import run_launch
from tests.trainer.finetune.conftest import conll_sentences, finetune_run


@pytest.fixture(scope="module")
def sst2_run(sst2, tmp_path_factory):
    out = tmp_path_factory.mktemp("sst2_run")
    return finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, epochs=2), out


def read_tsv(path: Path) -> list[dict[str, str]]:
    header, *rows = path.read_text(encoding="utf-8").splitlines()
    return [dict(zip(header.split("\t"), r.split("\t"))) for r in rows]


def test_sst2_results_predictions_and_best_checkpoint(sst2_run, sst2):
    results, out = sst2_run
    dev = load_task_data(str(sst2["dev"]), get_task(T.CLASSIFICATION))
    assert results["task"] == {
        "kind": "classification",
        "glue": "sst2",
        "labels": ["0", "1"],
        "label_names": ["0", "1"],
        "primary_metric": "accuracy",
        "metric_scale": "fraction",
    }
    assert [e["epoch"] for e in results["epochs"]] == [1, 2] and results["steps_per_epoch"] == 20  # 320 / 16
    assert all(e["eval"]["rows"] == 200 for e in results["epochs"])  # every eval row scored
    best = results["best"]
    assert best["value"] == max(e["eval"]["accuracy"] for e in results["epochs"])
    assert json.loads((out / "results.json").read_text()) == results

    rows = read_tsv(out / "predictions.tsv")
    assert list(rows[0]) == ["input", "line", "prediction", "label"]  # no packed row id (131072 was line 2)
    assert [(r["input"], int(r["line"])) for r in rows] == [
        ("dev.tsv", T.split_row_id(int(rid))[1]) for rid in dev.columns[T.ROW_ID]
    ]
    assert {r["prediction"] for r in rows} <= {"0", "1"}
    src = (sst2["dev"].parent / "dev.tsv").read_text(encoding="utf-8").splitlines()
    for r in rows:  # row ids point at the input line; the label column is that line's label
        assert src[int(r["line"]) - 1].rsplit("\t", 1)[1] == r["label"]
    recomputed = sum(r["prediction"] == r["label"] for r in rows) / len(rows)
    assert recomputed == pytest.approx(best["eval"]["accuracy"])

    assert ckpt.list_checkpoints(out) == [Path(best["checkpoint"])]  # only the best is kept
    weights = load_file(Path(best["checkpoint"]) / "model.safetensors")
    assert weights["classifier.weight"].shape == (2, 128) and "bert.embeddings.word_embeddings.weight" in weights
    config = json.loads((Path(best["checkpoint"]) / "config.json").read_text())
    assert config["model"]["hidden_size"] == 128 and config["task"]["labels"] == ["0", "1"]
    evals = [r for r in read_metrics(out) if r.get("split") == "eval"]
    assert [r["epoch"] for r in evals] == [1, 2] and all("accuracy" in r for r in evals)
    assert any(r.get("split", "train") == "train" and "loss" in r for r in read_metrics(out))


def test_unlabeled_glue_test_split_still_gets_predictions(sst2, tmp_path):
    results = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["test"], tmp_path / "run", max_steps=3)
    assert results["best"]["value"] is None and results["epochs"][0]["eval"] == {}
    rows = read_tsv(tmp_path / "run" / "predictions.tsv")
    assert len(rows) == 60 and all(r["label"] == "" and r["prediction"] in ("0", "1") for r in rows)


def test_same_seed_same_run(sst2, tmp_path):
    a = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "a", max_steps=4, log_every=1)
    b = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "b", max_steps=4, log_every=1)
    assert [r["loss"] for r in read_metrics(tmp_path / "a")] == [r["loss"] for r in read_metrics(tmp_path / "b")]
    assert a["epochs"] == b["epochs"]


def test_the_optimizer_comes_from_the_table_and_a_resume_keeps_it(sst2, tmp_path):
    kw = {"max_steps": 3, "log_every": 1, "resume": "auto"}
    adamw = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "adamw", **kw)
    lamb = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "lamb", optimizer="lamb", **kw)
    assert adamw["config"]["optim"]["optimizer"] == "adamw" and lamb["config"]["optim"]["optimizer"] == "lamb"
    first, second = ([r["loss"] for r in read_metrics(tmp_path / d)] for d in ("adamw", "lamb"))
    assert first[0] == second[0] and first[1:] != second[1:]  # the same first batch, then other updates
    with pytest.raises(RunError, match=r"--optimizer adamw \(the run has lamb\)"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "lamb", **kw)


def test_regression_and_sentence_pairs_with_f1(sst2, task_vocab, tmp_path):
    from tests.conftest import shared_path
    from tests.jobs import run_classification
    from tests.trainer.finetune.conftest import head_lines

    # regression: SST-2's 0/1 labels read as floats (no STS-B here); Pearson/Spearman/MSE on every row
    reg = {}
    for split in ("train", "dev"):
        reg[split] = tmp_path / f"reg_{split}"
        run_classification(
            inputs=[str(sst2[split].parent / f"{split}.tsv")],
            vocab=str(task_vocab),
            output=str(reg[split]),
            text_column="sentence",
            label_column="label",
            regression=True,
            split=split,
            max_seq_length=64,
        )
    results = finetune_run(T.REGRESSION, reg["train"], reg["dev"], tmp_path / "reg", max_steps=6)
    scores = results["best"]["eval"]
    assert results["task"]["primary_metric"] == "spearman" and scores["rows"] == 200
    rows = read_tsv(tmp_path / "reg" / "predictions.tsv")
    pred, gold = [float(r["prediction"]) for r in rows], [float(r["label"]) for r in rows]
    assert M.spearman(pred, gold) == pytest.approx(scores["spearman"], abs=1e-3)
    assert M.pearson(pred, gold) == pytest.approx(scores["pearson"], abs=1e-3)

    # MRPC: sentence pairs, F1 of the positive class "1" is the primary metric
    mrpc = {}
    for split, n in (("train", 161), ("dev", 101)):
        tsv = head_lines(shared_path("tasks", "mrpc", f"{split}.tsv"), tmp_path / f"mrpc_{split}.tsv", n)
        mrpc[split] = tmp_path / f"mrpc_{split}"
        run_classification(
            inputs=[str(tsv)],
            vocab=str(task_vocab),
            output=str(mrpc[split]),
            glue="mrpc",
            split=split,
            max_seq_length=64,
        )
    results = finetune_run(T.CLASSIFICATION, mrpc["train"], mrpc["dev"], tmp_path / "mrpc", max_steps=6)
    scores = results["best"]["eval"]
    assert results["task"]["primary_metric"] == "f1" and scores["rows"] == 100
    rows = read_tsv(tmp_path / "mrpc" / "predictions.tsv")
    pred, gold = [int(r["prediction"]) for r in rows], [int(r["label"]) for r in rows]
    assert scores["f1"] == pytest.approx(M.binary_f1(pred, gold, positive=1))
    assert scores["accuracy"] == pytest.approx(M.accuracy(pred, gold))


def test_score_uses_the_glue_task_metric(sst2):
    import dataclasses

    import numpy as np

    from bertstream.trainer.finetune.tasks import get_task

    def primary_metric(kind: str, glue: str | None) -> str:
        return get_task(kind).primary_metric(glue)

    assert [primary_metric(T.CLASSIFICATION, g) for g in ("cola", "mrpc", "qqp", "sst2", None)] == [
        "mcc",
        "f1",
        "f1",
        "accuracy",
        "accuracy",
    ]
    assert (primary_metric(T.REGRESSION, "stsb"), primary_metric(T.NER, None), primary_metric(T.SQUAD, None)) == (
        "spearman",
        "f1",
        "f1",
    )
    dev = load_task_data(str(sst2["dev"]), get_task(T.CLASSIFICATION))
    gold = dev.columns[T.LABEL].astype(int)
    pred = gold.copy()
    pred[:40] = 1 - pred[:40]  # 40 of 200 wrong
    outputs = [np.eye(2, dtype=np.float32)[p] for p in pred]
    as_cola = dataclasses.replace(
        dev, manifest=dataclasses.replace(dev.manifest, task={**dev.manifest.task, "glue": "cola"})
    )
    scores, text = get_task(T.CLASSIFICATION).score(as_cola, outputs, n_best=20, max_answer_length=30)
    assert scores["accuracy"] == pytest.approx(160 / 200) and "f1" not in scores
    assert scores["mcc"] == pytest.approx(M.matthews_corrcoef(pred, gold)) and scores["mcc"] > 0.5
    assert text.count("\n") == 201


def test_ner_from_our_checkpoint_writes_conll_predictions_for_every_word(conll, sst2_run, tmp_path):
    # --init: the SST-2 run's best checkpoint (same vocabulary): its encoder, a fresh token classifier
    results = finetune_run(
        T.NER, conll["train"], conll["valid"], tmp_path / "run", init=results_checkpoint(sst2_run), dropout=0.2
    )
    assert results["init"]["kind"] == "checkpoint"
    assert sst2_run[0]["model"]["hidden_dropout"] == 0.1  # the init's own setting unless --dropout
    assert results["model"]["hidden_dropout"] == results["model"]["attention_dropout"] == 0.2
    scores = results["best"]["eval"]
    gold_sentences = conll_sentences(conll["valid"].parent / "valid.txt")
    assert scores["sentences"] == len(gold_sentences) and scores["words"] == sum(map(len, gold_sentences))
    assert scores["words_from"] == "input"

    blocks = (tmp_path / "run" / "predictions.conll").read_text(encoding="utf-8").split("\n\n")
    blocks = [b for b in blocks if b.strip()]
    assert len(blocks) == len(gold_sentences)
    gold, pred = [], []
    for block, sentence in zip(blocks, gold_sentences):
        lines = [line.split(" ") for line in block.splitlines()]
        assert [(w, g) for w, g, _ in lines] == sentence  # original words and tags, in order, each once
        gold.append([g for _, g, _ in lines])
        pred.append([p for _, _, p in lines])
    assert all(t in results["task"]["labels"] for s in pred for t in s)
    again = M.conll_scores(gold, pred)
    assert again["f1"] == pytest.approx(scores["f1"]) and again["accuracy"] == pytest.approx(scores["accuracy"])


def results_checkpoint(run) -> str:
    return run[0]["best"]["checkpoint"]


def test_squad_predictions_json_for_every_question(squad, tmp_path):
    results = finetune_run(T.SQUAD, squad["train"], squad["dev"], tmp_path / "run", max_steps=25, batch_size=32)
    examples = [json.loads(line) for line in (squad["dev"] / "examples.jsonl").read_text().splitlines()]
    predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
    assert list(predictions) == [e["id"] for e in examples] and len(examples) == 108
    for e in examples:
        assert predictions[e["id"]] in e["context"]
    scores = results["best"]["eval"]
    assert scores["questions"] == 108 and results["task"]["metric_scale"] == "fraction"
    assert 0.0 <= scores["exact_match"] <= scores["f1"] <= 1.0  # one scale with every other task's metrics
    assert scores == {
        **M.squad_scores(predictions, {e["id"]: e["answers"]["text"] for e in examples}),
        "loss": scores["loss"],
    }


def test_bad_inputs_are_refused_with_clear_errors(sst2, conll, tmp_path):
    other = Vocab((*SPECIAL_TOKENS, *(f"tok{i}" for i in range(95))))
    ck = ckpt.save(
        tmp_path / "other",
        1,
        model_state=BertForPreTraining(bert_tiny(len(other))).state_dict(),
        optimizer=None,
        rng={},
        state={},
        config={"model": bert_tiny(len(other)).to_dict()},
        vocab_text=other.text(),
        keep=1,
    )
    data_sha = load_task_data(str(sst2["train"]), get_task(T.CLASSIFICATION)).vocab.sha256
    with pytest.raises(VocabMismatchError, match=f"vocab sha256 {data_sha}.*vocab sha256 {other.sha256}.*--vocab {ck}"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "a", init=str(ck))
    with pytest.raises(TaskDataError, match="holds a 'classification' task but --task is 'regression'"):
        finetune_run(T.REGRESSION, sst2["train"], sst2["dev"], tmp_path / "b")
    with pytest.raises(TaskDataError, match="holds a 'ner' task but --task is 'classification'"):
        finetune_run(T.CLASSIFICATION, sst2["train"], conll["valid"], tmp_path / "c")
    finetune_run(T.CLASSIFICATION, sst2["train"], sst2["test"], tmp_path / "d", max_steps=1)
    with pytest.raises(UsageError, match="--overwrite"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["test"], tmp_path / "d", max_steps=1)


def test_rows_longer_than_the_models_positions_are_refused_naming_the_split_and_bertprep_flag(sst2, tmp_path):
    """Fine-tuning and ``embed`` of a task folder ask the model's one check (``BertConfig.too_long``): the line names
    the flag and folder whose rows are too long and the way out (bertprep's --max-seq-length). Before, fine-tuning's
    said "rows of up to N tokens" of neither split, and embed's named no way out."""
    from dataclasses import replace

    vocab = load_task_data(str(sst2["train"]), get_task(T.CLASSIFICATION)).vocab
    short = replace(bert_tiny(len(vocab)), max_position_embeddings=8)  # SST-2's rows are longer
    ck = ckpt.save(
        tmp_path / "short",
        1,
        model_state=BertForPreTraining(short).state_dict(),
        optimizer=None,
        rng={},
        state={},
        config={"model": short.to_dict()},
        vocab_text=vocab.text(),
        keep=1,
    )
    too_long = r"holds sequences of up to \d+ tokens but the model has 8 positions \(max_position_embeddings\): "
    way_out = "rebuild the data with a smaller bertprep --max-seq-length"
    with pytest.raises(TaskDataError, match=f"^--train-data {re.escape(str(sst2['train']))} {too_long}{way_out}$"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], tmp_path / "ft", init=str(ck))
    out = tmp_path / "e.arrow"
    result = CliRunner().invoke(main, ["embed", "--init", str(ck), "--input", str(sst2["dev"]), "--output", str(out)])
    assert result.exit_code == 1 and not out.exists()
    assert re.search(f"--input {re.escape(str(sst2['dev']))} {too_long}{way_out}$", result.output), result.output


def test_cli_runs_and_reports_a_label_list_mismatch(sst2, task_vocab, tmp_path):
    from tests.jobs import run_classification

    common = [
        "finetune",
        "--task",
        "classification",
        "--train-data",
        str(sst2["train"]),
        "--init",
        "random:tiny",
        "--batch-size",
        "16",
        "--max-steps",
        "2",
        "--no-tensorboard",
    ]
    ok = CliRunner().invoke(
        main, [*common, "--eval-data", str(sst2["dev"]), "--output", str(tmp_path / "ok"), "--log-every", "1"]
    )
    assert ok.exit_code == 0, ok.output
    # --log-every shows on the console too (plain lines: the runner's stderr is no terminal), not only in metrics.jsonl
    assert re.search(r"step 1/2 \(50%\), .* step/s, elapsed .*: epoch 1 loss \d+\.\d{4}", ok.output), ok.output
    assert "step 2/2 (100%)" in ok.output
    assert "best epoch 1 (step 2): accuracy" in ok.output and (tmp_path / "ok" / "predictions.tsv").is_file()

    swapped = tmp_path / "swapped"
    run_classification(
        inputs=[str(sst2["dev"].parent / "dev.tsv")],
        vocab=str(task_vocab),
        output=str(swapped),
        glue="sst2",
        split="dev",
        labels=("1", "0"),
        max_seq_length=64,
    )
    bad = CliRunner().invoke(main, [*common, "--eval-data", str(swapped), "--output", str(tmp_path / "bad")])
    assert bad.exit_code == 1 and "different label lists" in bad.output and "Traceback" not in bad.output
    usage = CliRunner().invoke(
        main, [*common, "--eval-data", str(sst2["dev"]), "--output", str(tmp_path / "u"), "--warmup-ratio", "1.5"]
    )
    assert usage.exit_code == 2 and "--warmup-ratio" in usage.output


@pytest.mark.slow
def test_two_gloo_processes_train_equal_steps_and_score_every_row(sst2, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),  # a fixed port collides with another test's launch on the next worker
        "-m",
        "bertstream.trainer",
        "finetune",
        "--task",
        "classification",
        "--train-data",
        str(sst2["train"]),
        "--eval-data",
        str(sst2["dev"]),
        "--init",
        "random:tiny",
        "--output",
        str(tmp_path / "ddp"),
        "--batch-size",
        "16",
        "--epochs",
        "2",
        "--no-tensorboard",
        "--log-every",
        "5",
    ]
    run = run_launch(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    # rank 0 alone prints: one progress line per logged step, one closing line (both ranks share the console)
    assert [run.stderr.count(f"step {n}/20 (") for n in (5, 10, 15, 20)] == [1, 1, 1, 1], run.stderr
    assert run.stdout.count("best epoch") == 1, run.stdout
    results = json.loads((tmp_path / "ddp" / "results.json").read_text())
    assert results["world_size"] == 2 and results["steps_per_epoch"] == 10  # 160 rows per rank / 16
    assert all(e["eval"]["rows"] == 200 for e in results["epochs"])
    assert len(read_tsv(tmp_path / "ddp" / "predictions.tsv")) == 200


def test_the_plan_line_counts_in_the_unit_the_user_chose():
    from bertstream.trainer.finetune.config import FinetuneSteps

    def plan_text(max_steps: int, epochs: int, per_epoch: int, grad_accum: int = 1) -> str:
        return FinetuneSteps(32, grad_accum, max_steps, 0).plan(epochs, per_epoch)

    assert plan_text(3, 1, 218) == "3 steps (--max-steps; an epoch is 218 steps)"  # not "1 epochs x 218 steps"
    assert plan_text(0, 1, 218) == "1 epoch x 218 steps"
    assert plan_text(0, 3, 218) == "3 epochs x 218 steps"
    assert plan_text(0, 2, 50, grad_accum=4) == "2 epochs x 50 steps of 4 batches (--grad-accum)"


def test_kill_9_then_resume_auto_gives_the_same_metrics_and_results(sst2, tmp_path):
    args = [
        "finetune",
        "--task",
        "classification",
        "--train-data",
        str(sst2["train"]),
        "--eval-data",
        str(sst2["dev"]),
        "--init",
        "random:tiny",
        "--batch-size",
        "16",
        "--epochs",
        "2",
        "--lr",
        "1e-3",
        "--log-every",
        "1",
        "--no-tensorboard",
        "--resume",
        "auto",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def cli(out: Path, **kw) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "bertstream.trainer", *args, "--output", str(out)]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)

    whole = cli(tmp_path / "whole")
    assert whole.wait(timeout=600) == 0, whole.stdout.read()
    run = tmp_path / "killed"
    p = cli(run, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:  # into epoch 2: its first steps logged, epoch 1's state saved
        if (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 24:
            break
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    logged = len((run / "metrics.jsonl").read_text().splitlines())
    assert 24 <= logged < 42 and (run / "resume").is_dir()  # 40 train + 2 eval lines when whole
    resumed = cli(run)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resumed from" in out and "after epoch" in out
    assert read_metrics(run) == read_metrics(tmp_path / "whole")  # every loss, lr and eval metric, identical
    a, b = (json.loads((d / "results.json").read_text()) for d in (tmp_path / "whole", run))
    assert a["epochs"] == b["epochs"] and a["best"]["value"] == b["best"]["value"]
    assert (run / "predictions.tsv").read_text() == (tmp_path / "whole" / "predictions.tsv").read_text()


def test_a_checkpoint_saved_before_the_pooling_and_init_sections_resumes_and_keeps_them(sst2, tmp_path):
    """A run of 6001fe2 saved --pooling and --init at the top of its "finetune" settings; they are sections now
    (trainer/pooling.py, trainer/init_choice.py). Its checkpoint still resumes, and a resume still refuses them
    changed."""
    out = tmp_path / "run"
    finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto", pooling="mean")
    config_file = ckpt.list_checkpoints(out / "resume")[-1] / "config.json"
    saved = json.loads(config_file.read_text())
    settings = saved["finetune"]
    assert settings["pooled"] == {"pooling": "mean"} and settings["starting"] == {"init": "random:tiny"}
    before = {k: v for k, v in settings.items() if k not in ("pooled", "starting")}
    config_file.write_text(json.dumps({**saved, "finetune": {**before, "pooling": "mean", "init": "random:tiny"}}))
    with pytest.raises(RunError, match=r"--pooling cls \(the run has mean\)"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto")
    with pytest.raises(RunError, match=r"--init random:mini \(the run has random:tiny\)"):
        finetune_run(
            T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto", pooling="mean",
            init="random:mini",
        )  # fmt: skip
    again = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto", pooling="mean")
    assert [e["step"] for e in again["epochs"]] == [3]


def test_resume_auto_refuses_changed_flags_and_a_folder_with_nothing_to_resume(sst2, tmp_path):
    out = tmp_path / "run"
    finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto")
    with pytest.raises(RunError, match=r"--lr 0.002 \(the run has 0.001\).*--overwrite"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto", lr=2e-3)
    # A finished run resumes to its end: nothing more is trained, the results stay.
    again = finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto")
    assert [e["step"] for e in again["epochs"]] == [3]
    # Its state.json is untrusted: other types failed in tracebacks, an edited epoch repeated an epoch silently.
    state_file = ckpt.list_checkpoints(out / "resume")[-1] / "state.json"
    intact = json.loads(state_file.read_text())
    for damage, message in (
        ({"epoch": "x"}, r"damaged fine-tuning state \(epoch 'x'"),
        ({"epoch": 0}, r"damaged fine-tuning state \(epoch 0, 1 epoch row"),
        ({"best": 5}, "best int"),
        ({"data": "x"}, "batch plan state 'x' is not an object"),
        ({"scheduler": {**intact["scheduler"], "last_epoch": "3"}}, "scheduler.last_epoch is a string"),
    ):
        state_file.write_text(json.dumps({**intact, **damage}))
        with pytest.raises(RunError, match=message):
            finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto")
    shutil.rmtree(out / "resume")
    with pytest.raises(UsageError, match=r"no epoch to resume from \(--resume auto\)"):
        finetune_run(T.CLASSIFICATION, sst2["train"], sst2["dev"], out, max_steps=3, resume="auto")
