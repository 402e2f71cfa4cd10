"""The pretraining-gain recipe's own steps: the tasks' unlabelled text (scripts/recipes/task_text.py) and the report
that turns the fine-tuning runs into results.json (scripts/recipes/pretraining_gain_report.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, shared_path

SCRIPTS = REPO / "scripts" / "recipes"


def test_task_text_holds_the_training_splits_and_nothing_of_the_evaluation_sets(tmp_path):
    tasks = shared_path("tasks")
    out = tmp_path / "text"
    done = subprocess.run(
        [sys.executable, SCRIPTS / "task_text.py", tasks, out], capture_output=True, text=True, check=True
    )
    assert "sst2 8,419 documents" in done.stdout  # 67,349 phrases, 8 a document
    docs = {f.stem: f.read_text(encoding="utf-8") for f in out.glob("*.txt")}
    assert sorted(docs) == ["conll", "mrpc", "squad_contexts", "squad_questions", "sst2"]
    # sentences format: documents separated by one blank line, none empty; no label column left
    for name in ("sst2", "conll", "mrpc", "squad_questions"):
        blocks = docs[name].rstrip("\n").split("\n\n")
        assert all(b.strip() and "\t" not in b for b in blocks), name
    assert docs["sst2"].split("\n", 1)[0] == "hide new secretions from the parental units"
    assert docs["conll"].startswith("EU rejects German call to boycott British lamb .\n")
    assert "-DOCSTART-" not in docs["conll"] and "B-ORG" not in docs["conll"]
    assert len(docs["mrpc"].rstrip("\n").split("\n\n")) == 3668
    # SQuAD: the training articles (0-39) only; the evaluation articles' contexts never reach pretraining
    data = json.loads((tasks / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    train_contexts = [" ".join(p["context"].split()) for a in data[:40] for p in a["paragraphs"]]
    eval_contexts = [" ".join(p["context"].split()) for a in data[40:48] for p in a["paragraphs"]]
    lines = docs["squad_contexts"].splitlines()
    assert lines == train_contexts
    assert not set(eval_contexts) & set(lines)
    # SST-2's dev sentences are not in its training text
    dev = [r.split("\t")[0].strip() for r in (tasks / "sst2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    phrases = {" ".join(p.split()) for p in docs["sst2"].splitlines()}
    assert sum(d in phrases for d in dev) == 0


def test_task_text_refuses_a_bad_article_range(tmp_path):
    tasks = shared_path("tasks")
    done = subprocess.run(
        [sys.executable, SCRIPTS / "task_text.py", tasks, tmp_path, "--squad-articles", "x"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith("Error: --squad-articles 'x'")


def _run(root, name, metric_values):
    run = root / "finetune" / name
    run.mkdir(parents=True)
    best = {"eval": metric_values}
    (run / "results.json").write_text(json.dumps({"best": best}), encoding="utf-8")


def test_squad_scores_are_fractions_in_the_report_also_from_runs_that_wrote_percentages(tmp_path):
    sys.path.insert(0, str(SCRIPTS))
    try:
        import pretraining_gain_report as report
    finally:
        sys.path.remove(str(SCRIPTS))
    run = tmp_path / "squad-pretrained-1"
    run.mkdir()
    old = {"task": {"metric_scale": "percent"}, "best": {"eval": {"f1": 11.5, "exact_match": 2.0, "loss": 4.0}}}
    (run / "results.json").write_text(json.dumps(old), encoding="utf-8")
    assert report.best_eval(run) == {"f1": 0.115, "exact_match": 0.02, "loss": 4.0}
    # a report's results.json of before (no "metric_scale") renders on the one scale; a new one as it is
    earlier = {"squad": {"metric": "f1", "pretrained": [11.5, 11.7], "random": [10.0, 10.2]}}
    assert "| squad | f1 | 0.116 ± 0.0014 | 0.101 ± 0.0014 | +0.015 | 2 |" in report.gain_table(earlier)
    now = {"metric_scale": "fraction", "squad": {"metric": "f1", "pretrained": [0.115], "random": [0.1]}}
    assert report.gain_table(now)[2].startswith("| squad | f1 | 0.115 ± 0 | 0.1 ± 0 |")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_report_writes_results_json_in_the_issues_layout(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path
    (out / "pretrain").mkdir()
    (out / "pretrain_minutes").write_text("50.0\n")
    evals = [{"step": s, "split": "eval", "mlm_loss": 7.0 - s / 1000, "mlm_accuracy": s / 10000} for s in (100, 200)]
    (out / "pretrain" / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    for seed, (p, r) in zip((1, 2), ((0.82, 0.78), (0.84, 0.79))):
        _run(out, f"sst2-pretrained-{seed}", {"accuracy": p})
        _run(out, f"sst2-random-{seed}", {"accuracy": r})
        _run(out, f"mrpc-pretrained-{seed}", {"f1": p, "accuracy": p - 0.1})
        _run(out, f"mrpc-random-{seed}", {"f1": r, "accuracy": r - 0.1})
    _run(out, "curve-sst2-step100", {"accuracy": 0.79})
    args = ["--prep-minutes", "3", "--steps", "200", "--curve-steps", "100", "--seeds", "1", "2"]
    done = subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_gain_report.py", out, *args, "--tasks", "sst2", "mrpc"],
        capture_output=True,
        text=True,
        check=True,
    )
    results = json.loads((out / "results.json").read_text())
    assert results["sst2"] == {"metric": "accuracy", "pretrained": [0.82, 0.84], "random": [0.78, 0.79]}
    assert results["mrpc"]["metric"] == "f1" and results["mrpc"]["random_accuracy"] == pytest.approx([0.68, 0.69])
    assert results["pretrain_minutes"] == 50.0
    points = results["curve"]["points"]
    assert [p["step"] for p in points] == [0, 100, 200]
    assert [p["score"] for p in points] == [0.78, 0.79, 0.82]  # random seed 1, the curve run, the recipe's own
    assert points[1]["minutes"] == 25.0 and points[2]["mlm_loss"] == pytest.approx(6.8)
    assert "| sst2 | accuracy | 0.83 ± 0.014 | 0.785 ± 0.0071 | +0.045 | 2 |" in done.stdout
    assert (out / "curve.png").stat().st_size > 10_000
    # --reference: the Hugging Face model's first-seed score per task, beside the two columns
    _run(out, "sst2-reference-1", {"accuracy": 0.86})
    done = subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_gain_report.py", out, *args, "--tasks", "sst2", "mrpc"]
        + ["--reference", "hf/minilm"],
        capture_output=True,
        text=True,
        check=True,
    )
    reference = json.loads((out / "results.json").read_text())["reference"]
    assert reference == {
        "source": "hf/minilm",
        "seed": 1,
        "sst2": {"metric": "accuracy", "score": 0.86},
        "mrpc": None,  # not run: shown as such, the other columns stay
    }
    assert "| +0.045 | 2 | 0.86 |" in done.stdout and "| 2 | not run |" in done.stdout
    _run(out, "mrpc-reference-1", {"f1": 0.88, "accuracy": 0.83})
    subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_gain_report.py", out, *args, "--tasks", "sst2", "mrpc"]
        + ["--reference", "hf/minilm"],
        check=True,
        capture_output=True,
    )
    reference = json.loads((out / "results.json").read_text())["reference"]
    assert reference["mrpc"] == {"metric": "f1", "score": 0.88, "accuracy": 0.83}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_report_counts_the_curve_over_both_phases(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path
    (out / "pretrain64").mkdir()
    (out / "pretrain").mkdir()
    (out / "pretrain_minutes").write_text("30.0\n")
    (out / "pretrain64_minutes").write_text("20.0\n")  # phase one: 200 steps in 20 minutes, phase two 100 in 10

    def evals(folder, losses):
        rows = [{"step": s, "split": "eval", "mlm_loss": v, "mlm_accuracy": 0.1} for s, v in losses.items()]
        rows.append({"step": 10, "loss": 9.0})  # a training row: not an evaluation
        (out / folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    evals("pretrain64", {100: 6.0, 200: 5.5})
    evals("pretrain", {50: 5.2, 100: 5.0})  # phase two counts from its own step 0
    _run(out, "sst2-pretrained-1", {"accuracy": 0.83})
    _run(out, "sst2-random-1", {"accuracy": 0.78})
    _run(out, "curve-sst2-step100", {"accuracy": 0.79})
    _run(out, "curve-sst2-step250", {"accuracy": 0.81})
    args = ["--prep-minutes", "1", "--steps", "300", "--short-steps", "200", "--curve-steps", "100", "250"]
    subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_gain_report.py", out, *args, "--seeds", "1", "--tasks", "sst2"],
        capture_output=True,
        text=True,
        check=True,
    )
    results = json.loads((out / "results.json").read_text())
    points = results["curve"]["points"]
    assert [(p["step"], p["minutes"], p["score"]) for p in points] == [
        (0, 0.0, 0.78),
        (100, 10.0, 0.79),  # phase one's pace: 10 steps a minute
        (250, 25.0, 0.81),  # phase two's: 5 steps a minute, from minute 20
        (300, 30.0, 0.83),
    ]
    assert [p.get("mlm_loss") for p in points[1:]] == [6.0, 5.2, 5.0]
    assert results["heldout"] == {"step": 300, "mlm_loss": 5.0, "mlm_accuracy": 0.1}


def test_report_names_a_missing_run_in_one_line(tmp_path):
    (tmp_path / "pretrain_minutes").write_text("1.0\n")
    _run(tmp_path, "sst2-pretrained-1", {"accuracy": 0.8})  # its random twin never finished
    done = subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_gain_report.py", tmp_path, "--prep-minutes", "1", "--steps", "1"]
        + ["--seeds", "1", "--tasks", "sst2"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("Error: ") and "sst2-random-1/results.json not found" in done.stderr


def test_report_adds_the_continued_reference_and_ablation_arms(tmp_path):
    """``--continued``: the reference fine-tuned as it is and after continued pretraining, each seed, in
    ``results.json["continued"]``; the ablation report reads each arm's results against the base arm's random runs."""
    out = tmp_path / "arm-base"
    (out / "pretrain").mkdir(parents=True)
    (out / "pretrain_minutes").write_text("20.0\n")
    (out / "continue_minutes").write_text("30.0\n")
    evals = [{"step": s, "split": "eval", "mlm_loss": 7.0 - s / 1000, "mlm_accuracy": s / 10000} for s in (100, 200)]
    (out / "pretrain" / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    for seed, (p, r, b, a) in zip((1, 2), ((0.80, 0.76, 0.86, 0.87), (0.82, 0.78, 0.85, 0.88))):
        _run(out, f"sst2-pretrained-{seed}", {"accuracy": p})
        _run(out, f"sst2-random-{seed}", {"accuracy": r})
        _run(out, f"sst2-continued-before-{seed}", {"accuracy": b})
        _run(out, f"sst2-continued-after-{seed}", {"accuracy": a})
    args = ["--prep-minutes", "1", "--steps", "200", "--curve-steps", "--seeds", "1", "2", "--tasks", "sst2"]
    done = subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_gain_report.py", out, *args, "--continued", "sst2"]
        + ["--continue-steps", "900"],
        capture_output=True,
        text=True,
        check=True,
    )
    results = json.loads((out / "results.json").read_text())
    assert results["continued"] == {
        "steps": 900,
        "minutes": 30.0,
        "epochs": 1,
        "sst2": {"metric": "accuracy", "before": [0.86, 0.85], "after": [0.87, 0.88]},
    }
    assert results["heldout"] == {"step": 200, "mlm_loss": 6.8, "mlm_accuracy": 0.02}
    assert "| sst2 | accuracy | 0.855 ± 0.0071 | 0.875 ± 0.0071 | +0.02 |" in done.stdout
    assert "curve" not in results  # --curve-steps given empty: no curve runs are read
    # an arm that fine-tunes the pretrained init only is compared with the base arm's random runs
    arm = tmp_path / "arm-mlm40"
    (arm / "pretrain").mkdir(parents=True)
    (arm / "pretrain_minutes").write_text("20.0\n")
    (arm / "pretrain" / "metrics.jsonl").write_text(json.dumps(evals[0]) + "\n")
    for seed, p in zip((1, 2), (0.84, 0.86)):
        _run(arm, f"sst2-pretrained-{seed}", {"accuracy": p})
    subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_gain_report.py", arm, *args, "--inits", "pretrained"],
        check=True,
        capture_output=True,
    )
    table = subprocess.run(
        [sys.executable, SCRIPTS / "pretraining_ablation_report.py", tmp_path, "--budget", "20"]
        + ["--arms", "base", "mlm40"],
        capture_output=True,
        text=True,
        check=True,
    )
    ablation = json.loads((tmp_path / "ablation.json").read_text())
    assert ablation["arms"]["mlm40"]["tasks"]["sst2"]["gain"] == pytest.approx(0.85 - 0.77)
    assert ablation["arms"]["base"]["tasks"]["sst2"]["gain"] == pytest.approx(0.81 - 0.77)
    assert "| mlm40 | masking 0.4 | 200 | 6.90 / 0.010 | 0.850 ± 0.014 (+0.080) |" in table.stdout
    # an arm pretrained but not yet fine-tuned (STOP_AFTER=pretrain): its steps and held-out loss, no scores
    arm = tmp_path / "arm-len64"
    (arm / "pretrain").mkdir(parents=True)
    (arm / "pretrain_minutes").write_text("21.0\n")
    (arm / "recipe.txt").write_text("steps=4311 model=tiny seeds=1 2 3 short_steps=3655\n")
    rows = [{"step": 650, "loss": 5.1}, {"step": 656, "split": "eval", "mlm_loss": 5.08, "mlm_accuracy": 0.221}]
    (arm / "pretrain" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ablation_args = [sys.executable, SCRIPTS / "pretraining_ablation_report.py", tmp_path, "--budget", "20"]
    table = subprocess.run(
        [*ablation_args, "--arms", "base", "mlm40", "len64"], capture_output=True, text=True, check=True
    )
    assert "| len64 | length 64 for 70% of the time, then 128 | 4,311 | 5.08 / 0.221 | not fine-tuned |" in table.stdout
    assert json.loads((tmp_path / "ablation.json").read_text())["arms"]["len64"]["fine_tuned"] is False
    # an arm whose pretraining has not finished is named in one line, not tabled
    (tmp_path / "arm-mlm15").mkdir()
    refused = subprocess.run([*ablation_args, "--arms", "base", "mlm15"], capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stderr.startswith("Error: ") and "arm mlm15" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_report_of_a_reference_only_pass_holds_the_continued_figures_alone(tmp_path):
    """``ONLY=reference`` pretrains no tiny model: the report takes no ``--tasks`` and writes the reference's and
    the continued pretraining's figures, reading no pretraining folder."""
    (tmp_path / "continue_minutes").write_text("29.5\n")
    for seed, (b, a) in zip((1, 2), ((0.70, 0.74), (0.72, 0.73))):
        _run(tmp_path, f"conll-continued-before-{seed}", {"f1": b})
        _run(tmp_path, f"conll-continued-after-{seed}", {"f1": a})
    _run(tmp_path, "sst2-reference-1", {"accuracy": 0.85})
    report = [sys.executable, SCRIPTS / "pretraining_gain_report.py", tmp_path, "--prep-minutes", "2", "--steps", "0"]
    done = subprocess.run(
        [*report, "--seeds", "1", "2", "--tasks", "--reference", "hf/minilm", "--reference-tasks", "sst2", "mrpc"]
        + ["--continued", "conll", "--continue-steps", "450", "--continue-epochs", "2", "--curve-steps", "100"],
        capture_output=True,
        text=True,
        check=True,
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results == {
        "metric_scale": "fraction",
        "prep_minutes": 2.0,
        "reference": {"source": "hf/minilm", "seed": 1, "sst2": {"metric": "accuracy", "score": 0.85}, "mrpc": None},
        "continued": {
            "steps": 450,
            "minutes": 29.5,
            "epochs": 2,
            "conll": {"metric": "f1", "before": [0.70, 0.72], "after": [0.74, 0.73]},
        },
    }
    assert "| conll | f1 | 0.71 ± 0.014 | 0.735 ± 0.0071 | +0.025 |" in done.stdout
    assert not (tmp_path / "curve.png").exists()


def test_train_rate_is_the_median_after_the_first_quarter_of_the_steps(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "seq_per_s": r} for s, r in [(10, 5.0), (20, 90.0), (30, 100.0), (40, 110.0), (50, 300.0)]]
    rows.append({"step": 50, "split": "eval", "seq_per_s": 1.0, "mlm_loss": 7.0})  # evaluation: not a training rate
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, SCRIPTS / "train_rate.py", metrics], capture_output=True, text=True, check=True
    )
    assert float(done.stdout) == 105.0  # steps 20-50 (after 50/4): 90, 100, 110, 300

    metrics.write_text(json.dumps({"step": 10, "split": "eval", "mlm_loss": 7.0}) + "\n", encoding="utf-8")
    refused = subprocess.run([sys.executable, SCRIPTS / "train_rate.py", metrics], capture_output=True, text=True)
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: ") and "no training rate" in refused.stderr
    assert "Traceback" not in refused.stderr


def _gain(tmp_path, out, **env):
    import os

    full = {**os.environ, "SHARED": str(tmp_path / "no-shared-data-here"), **env}
    return subprocess.run(
        ["bash", SCRIPTS / "pretraining_gain.sh", out], capture_output=True, text=True, env=full, timeout=60
    )


def test_gain_refuses_a_budget_that_is_not_a_number_in_one_line(tmp_path):
    done = _gain(tmp_path, tmp_path / "run", MINUTES="an hour")
    assert done.returncode == 2
    assert done.stderr == "Error: MINUTES must be a positive number, got 'an hour'\n"
    assert not (tmp_path / "run").exists()
    done = _gain(tmp_path, tmp_path / "run", FT_PARALLEL="0")
    assert done.returncode == 2 and done.stderr == "Error: FT_PARALLEL must be a whole number >= 1, got '0'\n"
    # issue 44: a count that becomes processes has the machine's ceiling (PARALLEL=1000 started 1000 runs at once)
    for many in ("1000", "99999999999999999999999"):
        done = _gain(tmp_path, tmp_path / "run", FT_PARALLEL=many)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"Error: FT_PARALLEL={many} is more than this machine runs: at most ")
    assert not (tmp_path / "run").exists()


def test_prepared_data_travels_without_the_shared_corpus(tmp_path):
    out = tmp_path / "run"
    missing = _gain(tmp_path, out, STOP_AFTER="data")
    assert missing.returncode == 2 and "no-shared-data-here/pretrain/wikipedia not found" in missing.stderr

    # A folder whose data was prepared elsewhere (prep_minutes written by that stage) needs no SHARED.
    out.mkdir()
    (out / "prep_minutes").write_text("1.53\n", encoding="utf-8")
    done = _gain(tmp_path, out, STOP_AFTER="data", GENERAL_DUPE="1", TASK_DUPE="1")
    assert done.returncode == 0, done.stderr
    assert "[pretraining_gain] data ready in 1.53 minutes" in done.stderr
    assert (out / "recipe.txt").read_text(encoding="utf-8").rstrip().endswith(" dupe=1:1")
    # ... and keeps its recipe: the same folder with the default dupes is another recipe
    other = _gain(tmp_path, out, STOP_AFTER="data")
    assert other.returncode == 2 and "holds a recipe run with other settings" in other.stderr


def test_gain_refuses_fine_tuning_epochs_that_miss_a_task_in_one_line(tmp_path):
    done = _gain(tmp_path, tmp_path / "run", FT_EPOCHS="sst2:6,mrpc:5", TASKS="sst2 conll")
    assert done.returncode == 2
    assert done.stderr == "Error: FT_EPOCHS has no epochs for task conll (FT_EPOCHS=sst2:6 mrpc:5)\n"
    out = tmp_path / "run"
    out.mkdir()
    (out / "prep_minutes").write_text("1\n", encoding="utf-8")
    ok = _gain(tmp_path, out, STOP_AFTER="data", FT_EPOCHS="sst2:6,mrpc:5,conll:3,squad:2")
    assert ok.returncode == 0, ok.stderr
    assert " ft_epochs=sst2:6,mrpc:5,conll:3,squad:2 " in (out / "recipe.txt").read_text(encoding="utf-8")


def _sweep_run(root, name, best_eval):
    run = root / name
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"best": {"eval": best_eval}}), encoding="utf-8")


def test_sweep_report_compares_each_cell_and_each_init_at_its_best(tmp_path):
    """Every cell holds both inits; the conservative gain pits each init's best cell against the other's."""
    scores = {  # (epochs, lr, init) -> SST-2 accuracy per seed
        (3, "3e-4", "pretrained"): [0.77, 0.78],
        (3, "3e-4", "random"): [0.76, 0.76],
        (6, "6e-4", "pretrained"): [0.80, 0.80],
        (6, "6e-4", "random"): [0.75, 0.75],
    }
    for (epochs, lr, init), accs in scores.items():
        for seed, acc in enumerate(accs, 1):
            _sweep_run(tmp_path, f"sst2-lr{lr}-ep{epochs}-{init}-{seed}", {"accuracy": acc})
    (tmp_path / "sst2-lr3e-4-ep3-random-1.log").write_text("a log, not a run\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, SCRIPTS / "finetune_sweep_report.py", tmp_path], capture_output=True, text=True, check=True
    )
    assert "| 6 | 6e-4 | 0.800 ± 0.000 | 0.750 ± 0.000 | +0.050 |" in done.stdout
    sweep = json.loads((tmp_path / "sweep.json").read_text())["sst2"]
    assert [c["gain"] for c in sweep["cells"]] == pytest.approx([0.775 - 0.76, 0.05])
    assert sweep["best"]["random"] == {"mean": pytest.approx(0.76), "epochs": 3, "lr": 3e-4}
    assert sweep["conservative_gain"] == pytest.approx(0.80 - 0.76)

    # a cell fine-tuned from one init only cannot be compared: said in one line
    _sweep_run(tmp_path, "sst2-lr1e-3-ep6-pretrained-1", {"accuracy": 0.7})
    lone = subprocess.run(
        [sys.executable, SCRIPTS / "finetune_sweep_report.py", tmp_path], capture_output=True, text=True
    )
    assert lone.returncode == 1 and lone.stderr == "Error: sst2 epochs 6 lr 1e-3 lacks the random runs\n"


def test_sweep_refuses_a_folder_without_task_data_in_one_line(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    done = subprocess.run(
        ["bash", SCRIPTS / "finetune_sweep.sh", ckpt, tmp_path / "no-data", tmp_path / "out"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == f"Error: {tmp_path / 'no-data'}/sst2_train is not a task dataset\n"


# A stand-in for berttrain in the recipes' own logic (which runs are made, from which inputs): `finetune` scores
# a run by its init's `score` file (0.5 for a random init) and logs its call; `pretrain` fails, as the real one
# does, when a --data or --eval-data folder is not there, and logs a training rate.
FAKE_BERTTRAIN = r"""#!/usr/bin/env bash
cmd=$1; shift
declare -A a; data=()
while [ $# -gt 0 ]; do
    case $1 in --data | --eval-data) data+=("${2%:*}") ;; esac
    case $1 in --*) a[$1]=${2:-}; shift ;; esac; shift
done
for d in "${data[@]}"; do [ -d "$d" ] || { echo "Error: $d not found" >&2; exit 2; }; done
out=${a[--output]}; mkdir -p "$out"
echo "$cmd ${a[--init]:-}" >> "$FAKE_LOG"
if [ "$cmd" = finetune ]; then
    init=${a[--init]}; score=0.5
    [[ $init == random:* ]] || score=$(cat "$init/score")
    echo "{\"best\": {\"eval\": {\"accuracy\": $score}}}" > "$out/results.json"
else
    for s in 10 20 30 40; do echo "{\"step\": $s, \"split\": \"train\", \"seq_per_s\": 64.0}"; done > "$out/metrics.jsonl"
fi
"""


@pytest.fixture
def fake_berttrain(tmp_path):
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "berttrain"
    fake.write_text(FAKE_BERTTRAIN, encoding="utf-8")
    fake.chmod(0o755)
    log = tmp_path / "berttrain.log"
    log.touch()
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log)}, log


def test_sweep_cells_are_keyed_by_the_checkpoint_and_settings_that_made_them(tmp_path, fake_berttrain):
    env, log = fake_berttrain
    data = tmp_path / "data"
    for split in ("sst2_train", "sst2_dev"):
        (data / split).mkdir(parents=True)
        (data / split / "manifest.json").write_text("{}", encoding="utf-8")
    ckpts = {}
    for name, score in (("a", 0.8), ("b", 0.6)):
        ckpts[name] = tmp_path / name
        ckpts[name].mkdir()
        (ckpts[name] / "score").write_text(f"{score}\n", encoding="utf-8")
    grid = {"TASKS": "sst2", "LRS": "1e-4", "EPOCHS": "sst2:3", "SEEDS": "1"}

    def sweep(ckpt, **over):
        return subprocess.run(
            ["bash", SCRIPTS / "finetune_sweep.sh", ckpts[ckpt], data, tmp_path / "out"],
            capture_output=True,
            text=True,
            env={**env, **grid, **over},
            timeout=60,
        )

    def pretrained():
        return json.loads((tmp_path / "out" / "sweep.json").read_text())["sst2"]["best"]["pretrained"]

    assert sweep("a").returncode == 0 and pretrained()["mean"] == pytest.approx(0.8)
    assert len(log.read_text().splitlines()) == 2  # both inits
    assert sweep("a").returncode == 0 and len(log.read_text().splitlines()) == 2  # kept: the same inputs
    done = sweep("b")  # another checkpoint into the same folder: its own runs and its own numbers
    assert done.returncode == 0, done.stderr
    assert len(log.read_text().splitlines()) == 4 and pretrained()["mean"] == pytest.approx(0.6)
    (ckpts["b"] / "score").write_text("0.7\n", encoding="utf-8")  # the same folder, other weights
    assert sweep("b").returncode == 0 and pretrained()["mean"] == pytest.approx(0.7)
    # another grid into the folder reports its own cells only, not the earlier call's left there
    assert sweep("b", LRS="2e-4").returncode == 0
    assert [c["lr"] for c in json.loads((tmp_path / "out" / "sweep.json").read_text())["sst2"]["cells"]] == [2e-4]
    bad = sweep("b", LRS="1e-4 fast")
    assert bad.returncode == 2 and bad.stderr == "Error: LRS must be numbers above 0 and at most 1, got '1e-4 fast'\n"


def test_ablation_refuses_an_unknown_arm_before_any_work(tmp_path):
    import os

    env = {**os.environ, "SHARED": str(tmp_path / "no-shared-data-here"), "ARMS": "base mlm16"}
    done = subprocess.run(
        ["bash", SCRIPTS / "pretraining_ablation.sh", tmp_path / "out"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2 and done.stderr == "Error: unknown arm mlm16\n"
    assert not (tmp_path / "out").exists()


def test_gain_refuses_bad_steps_before_any_work(tmp_path):
    done = _gain(tmp_path, tmp_path / "run", STEPS="6800")  # SHORT_STEPS 6800: no second phase
    assert done.returncode == 2
    assert done.stderr == "Error: SHORT_STEPS (6800) must be less than STEPS (6800): the second phase needs steps\n"
    done = _gain(tmp_path, tmp_path / "run", STEPS="9k")
    assert done.returncode == 2 and done.stderr == "Error: STEPS must be whole numbers >= 1, got '9k'\n"
    done = _gain(tmp_path, tmp_path / "run", LR_SCHEDULE="cosine")
    assert done.returncode == 2 and done.stderr == "Error: LR_SCHEDULE must be among: wsd linear; got 'cosine'\n"
    assert not (tmp_path / "run").exists()


def test_gain_sizes_minutes_in_a_relative_folder(tmp_path, fake_berttrain):
    """The README's own use: `MINUTES=60 scripts/recipes/pretraining_gain.sh OUT`, OUT relative."""
    env, log = fake_berttrain
    out = tmp_path / "run"
    for d in ("vocab", "general", "tasks", "eval", "general64", "tasks64", "tasks_data"):
        (out / d).mkdir(parents=True)
    (out / "prep_minutes").write_text("1\n", encoding="utf-8")
    env = {**env, "SHARED": str(tmp_path / "none"), "MINUTES": "1", "SHORT_STEPS": "0", "STOP_AFTER": "steps"}
    done = subprocess.run(
        ["bash", SCRIPTS / "pretraining_gain.sh", "run"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert (out / "steps").read_text() == "60 0\n"  # 64 sequences/s for 60 s at batch 64


def test_gain_takes_its_settings_from_a_config_file_the_environment_winning(tmp_path):
    """``CONFIG=my.env``: a file of NAME=value lines over configs/pretraining_gain.env; the environment over both."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "prep_minutes").write_text("1\n", encoding="utf-8")
    config = tmp_path / "my.env"
    config.write_text('# a smaller run\nSTEPS=500\nSHORT_STEPS=300\nSEEDS="4 5"\n\nFT_LR=1e-4\n', encoding="utf-8")
    done = _gain(tmp_path, out, CONFIG=str(config), STOP_AFTER="data", FT_LR="2e-4")
    assert done.returncode == 0, done.stderr
    recipe = (out / "recipe.txt").read_text(encoding="utf-8")
    assert recipe.startswith("steps=500 model=tiny norm=pre lr=3e-3 ft_lr=2e-4 seeds=4 5 tasks=sst2 conll mrpc squad")
    assert " short_steps=300 " in recipe and " schedule=wsd batch=64 warmup=300 " in recipe  # the defaults file's


def test_gain_refuses_a_config_file_it_cannot_read_before_any_work(tmp_path):
    config = tmp_path / "my.env"
    config.write_text("STEPS=500\nSTEPPS=600\n", encoding="utf-8")
    done = _gain(tmp_path, tmp_path / "run", CONFIG=str(config))
    assert done.returncode == 2 and done.stderr.startswith(f"Error: {config} line 2: unknown setting STEPPS (")
    config.write_text("steps 500\n", encoding="utf-8")
    done = _gain(tmp_path, tmp_path / "run", CONFIG=str(config))
    assert done.returncode == 2 and done.stderr == f"Error: {config} line 1: expected NAME=value, got 'steps 500'\n"
    done = _gain(tmp_path, tmp_path / "run", CONFIG=str(tmp_path / "none.env"))
    assert done.returncode == 2 and done.stderr == f"Error: CONFIG file {tmp_path / 'none.env'} not found\n"
    config.write_text("STEPS=9k\n", encoding="utf-8")  # a config's value gets the same checks as the environment's
    done = _gain(tmp_path, tmp_path / "run", CONFIG=str(config))
    assert done.returncode == 2 and done.stderr == "Error: STEPS must be whole numbers >= 1, got '9k'\n"
    done = _gain(tmp_path, tmp_path / "run", STEPS="")
    assert done.returncode == 2 and done.stderr == "Error: STEPS is set empty; unset it for its default (9850)\n"
    assert not (tmp_path / "run").exists()


def test_the_recipes_keep_no_literal_default_of_their_own():
    """configs/RECIPE.env is the one place of each default: no ``NAME=${NAME:-value}`` left in the scripts."""
    import re

    for recipe in ("pretraining_gain", "pretraining_ablation", "finetune_sweep"):
        script = (SCRIPTS / f"{recipe}.sh").read_text(encoding="utf-8")
        assert f"load_config {recipe}" in script
        kept = re.findall(r"\b([A-Z][A-Z0-9_]*)=\$\{\1:?-[^}$]+\}", script)
        assert not kept, f"{recipe}.sh keeps defaults of its own: {kept}"


def test_ablation_reads_its_config_and_checks_it_before_any_work(tmp_path):
    import os

    config = tmp_path / "ablation.env"
    config.write_text("ARMS=base mlm16\n", encoding="utf-8")
    env = {**os.environ, "SHARED": str(tmp_path / "no-shared-data-here"), "CONFIG": str(config)}
    done = subprocess.run(
        ["bash", SCRIPTS / "pretraining_ablation.sh", tmp_path / "out"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2 and done.stderr == "Error: unknown arm mlm16\n"
    config.write_text("BUDGET=20\nMINUTES=5\n", encoding="utf-8")  # pretraining_gain.sh's, not the ablation's
    done = subprocess.run(
        ["bash", SCRIPTS / "pretraining_ablation.sh", tmp_path / "out"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2 and done.stderr.startswith(f"Error: {config} line 2: unknown setting MINUTES (")
    assert not (tmp_path / "out").exists()


def test_the_h200_config_file_is_the_documented_command(tmp_path):
    """configs/pretraining_gain_small_h200.env and docs/results.md's environment command make one recipe."""
    env_form = {"GENERAL_DUPE": "1", "TASK_DUPE": "1", "MODEL": "small", "BATCH": "256", "LR": "1e-3"}
    env_form |= {"PRECISION": "bf16", "MINUTES": "3.5", "STOP_AFTER": "data"}
    recipes = []
    for name, env in (
        ("env", env_form),
        ("config", {"CONFIG": str(SCRIPTS / "configs" / "pretraining_gain_small_h200.env"), "STOP_AFTER": "data"}),
    ):
        out = tmp_path / name
        out.mkdir()
        (out / "prep_minutes").write_text("1\n", encoding="utf-8")
        done = _gain(tmp_path, out, **env)
        assert done.returncode == 0, done.stderr
        recipes.append((out / "recipe.txt").read_text(encoding="utf-8"))
    assert recipes[0] == recipes[1] and "model=small" in recipes[1] and "dupe=1:1" in recipes[1]
