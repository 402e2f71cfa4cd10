from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import read_metrics
from bertstream.trainer.pretrain.loop import pretrain
from tests.beam_services import free_port

NO_DROPOUT = {"hidden_dropout": 0.0, "attention_dropout": 0.0}


def train(data, out, **kw) -> list[dict]:
    cfg = TrainConfig.build(
        **{
            "paths": (str(data),),
            "output": str(out),
            "batch_size": 8,
            "max_steps": 12,
            "warmup_steps": 3,
            "log_every": 1,
            "checkpoint_every": 6,
            "num_workers": 0,
            "tensorboard": False,
            "lr": 1e-3,
            **kw,
        }
    )
    pretrain(cfg)
    return [r for r in read_metrics(out) if r.get("split", "train") == "train"]


def cli(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bertstream.trainer", *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.fixture(scope="module")
def trained(demo_shards, tmp_path_factory) -> tuple[Path, list[dict]]:
    """40 steps on the demo shards with evaluation: the run folder and its training rows (two tests read it)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    rows = train(
        demo_shards,
        run,
        max_steps=40,
        eval_data=str(demo_shards),
        eval_every=20,
        eval_batches=5,
        log_every=5,
        batch_size=16,
        lr=2e-3,
    )
    return run, rows


def test_metrics_have_every_field_and_mlm_accuracy_rises(trained, tmp_path):
    run, rows = trained
    for key in (
        "step",
        "loss",
        "mlm_loss",
        "nsp_loss",
        "mlm_accuracy",
        "nsp_accuracy",
        "lr",
        "grad_norm",
        "seq_per_s",
        "tokens_per_s",
        "tokens",
        "slots",
    ):
        assert key in rows[0], key
    # 40 steps reach the frequency plateau (~0.07 on this corpus): compare the last 4 logged steps' mean with
    # the first step, since single 16-sequence records are noisy.
    late = sum(r["mlm_accuracy"] for r in rows[-4:]) / 4
    assert late > rows[0]["mlm_accuracy"] + 0.015
    assert rows[-1]["loss"] < rows[0]["loss"] - 2.0
    evals = [r for r in read_metrics(run) if r.get("split") == "eval"]
    assert [r["step"] for r in evals] == [20, 40]
    kept = ckpt.list_checkpoints(run)
    assert len(kept) == 3 and kept[-1].name == "step-0000040"  # --keep-checkpoints 3
    from bertstream.trainer.pretrain.plot import plot_run

    png = plot_run(run, tmp_path / "run.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unpadded_run_logs_the_padded_runs_losses_and_computes_little_padding(demo_shards, tmp_path):
    kw = {"max_steps": 3, "checkpoint_every": 3, "dropout": 0.0}
    unpadded = train(demo_shards, tmp_path / "unpad", **kw)  # the default
    padded = train(demo_shards, tmp_path / "pad", unpad=False, **kw)
    for a, b in zip(unpadded, padded, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["tokens"] == b["tokens"]
        assert a["tokens"] <= a["slots"] < a["tokens"] + 64 < b["slots"]  # the quantum's filler, no padding
    assert sum(r["tokens"] for r in padded) / sum(r["slots"] for r in padded) < 0.9  # what padding cost


def test_kill_9_then_resume_auto_logs_the_same_losses(demo_shards, tmp_path):
    args = [
        "pretrain",
        "--data",
        str(demo_shards),
        "--batch-size",
        "8",
        "--max-steps",
        "20",
        "--log-every",
        "1",
        "--checkpoint-every",
        "5",
        "--warmup-steps",
        "5",
        "--lr",
        "1e-3",
        "--num-workers",
        "2",
        "--no-tensorboard",
        "--deterministic",
        "--seed",
        "3",
    ]
    env = {"OMP_NUM_THREADS": "1"}
    whole = cli(*args, "--output", str(tmp_path / "whole"), env=env)
    assert whole.wait(timeout=600) == 0, whole.stdout.read()
    run = tmp_path / "killed"
    p = cli(*args, "--output", str(run), env=env, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        if (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 8:
            break
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)  # the trainer and its loader workers, mid-run
    p.wait()
    logged = len((run / "metrics.jsonl").read_text().splitlines())
    assert 8 <= logged < 20
    resumed = cli(*args, "--output", str(run), env=env)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resumed from" in out
    a, b = read_metrics(tmp_path / "whole"), read_metrics(run)
    assert [r["step"] for r in b] == list(range(1, 21))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]  # identical, not merely close
    assert [r["mlm_accuracy"] for r in a] == [r["mlm_accuracy"] for r in b]


def test_partial_and_broken_checkpoints_are_skipped(demo_shards, tmp_path):
    run = tmp_path / "run"
    train(demo_shards, run, max_steps=12, checkpoint_every=6)
    ckpts = ckpt.list_checkpoints(run)
    assert [c.name for c in ckpts] == ["step-0000006", "step-0000012"]
    # A process killed while writing leaves a .tmp folder; a damaged newest checkpoint must not be used either.
    partial = run / "checkpoints" / "step-0000018.tmp-999"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\x00" * 100)
    newest = ckpts[-1] / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[: len(newest.read_bytes()) // 2])
    restored = ckpt.latest(run)
    assert restored is not None and restored.step == 6
    rows = train(demo_shards, run, max_steps=14, checkpoint_every=100)
    assert not partial.exists()
    assert rows[-1]["step"] == 14 and [r["step"] for r in rows] == list(range(1, 15))


def test_grad_accumulation_matches_the_larger_batch(demo_shards, tmp_path):
    cfg = json.dumps(NO_DROPOUT)
    (tmp_path / "model.json").write_text(cfg)
    big = train(demo_shards, tmp_path / "big", batch_size=8, model_config=str(tmp_path / "model.json"), max_steps=6)
    acc = train(
        demo_shards,
        tmp_path / "acc",
        batch_size=4,
        grad_accum=2,
        model_config=str(tmp_path / "model.json"),
        max_steps=6,
    )
    for x, y in zip(big, acc):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5, abs=1e-5)


@pytest.mark.slow
def test_two_gloo_processes_match_one_process_with_the_doubled_batch(tmp_path):
    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset

    # Deliberately uneven shards: every rank must still run the same number of steps (no DDP hang).
    data = tmp_path / "uneven"
    vocab = bert_like_vocab(2000)
    write_dataset(data, make_instances(201, vocab=vocab, seed=5), [7, 130, 3, 61], vocab=vocab, formats=("arrow",))
    (tmp_path / "model.json").write_text(json.dumps(NO_DROPOUT))
    common = [
        "pretrain",
        "--data",
        str(data),
        "--max-steps",
        "8",
        "--log-every",
        "1",
        "--warmup-steps",
        "2",
        "--lr",
        "1e-3",
        "--num-workers",
        "0",
        "--no-tensorboard",
        "--model-config",
        str(tmp_path / "model.json"),
        "--checkpoint-every",
        "100",
        # The demanding case of each side: masks drawn per sample while training (one rank's draws must be the
        # single process's), and no NSP head, so DDP sees parameters without gradients.
        "--masking",
        "dynamic",
        "--no-nsp",
    ]
    env = {"OMP_NUM_THREADS": "1"}
    one = cli(*common, "--batch-size", "16", "--output", str(tmp_path / "one"), env=env)
    assert one.wait(timeout=600) == 0, one.stdout.read()
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),  # a fixed port collides with another test's launch on the next worker
            "-m",
            "bertstream.trainer",
            *common,
            "--batch-size",
            "8",
            "--output",
            str(tmp_path / "two"),
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert two.returncode == 0, two.stdout + two.stderr
    # rank 0 alone prints: one progress line per step, one closing line (both ranks share the console)
    assert [two.stderr.count(f"step {n}/8 (") for n in range(1, 9)] == [1] * 8, two.stderr
    assert two.stdout.count("trained to step 8") == 1, two.stdout
    a, b = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 9))
    for x, y in zip(a, b):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5)
        assert x["mlm_accuracy"] == pytest.approx(y["mlm_accuracy"], abs=1e-9)


def test_dropout_flag_sets_the_model_and_is_saved(demo_shards, tmp_path):
    train(demo_shards, tmp_path / "run", max_steps=2, checkpoint_every=2, batch_size=4, dropout=0.0)
    saved = json.loads((ckpt.step_dir(tmp_path / "run", 2) / "config.json").read_text())
    assert saved["model"]["hidden_dropout"] == saved["model"]["attention_dropout"] == 0.0
    assert saved["train"]["model"]["dropout"] == 0.0
    with pytest.raises(UsageError, match=r"dropout: must be in \[0, 1\), got 1.5"):
        TrainConfig.build(paths=("x",), output="y", dropout=1.5)


def test_two_phase_training_starts_from_phase_one_weights(trained, demo_corpus, demo_vocab, tmp_path):
    p1, _ = trained  # phase one: 40 steps
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.pretraining.pipeline import run_pretraining

    long = tmp_path / "long"
    run_pretraining(
        PretrainingJob(
            inputs=tuple([str(demo_corpus / "*.txt")]),
            vocab=str(demo_vocab / "vocab.txt"),
            output=str(long),
            config=PretrainingConfig(
                input_format="text", dupe_factor=1, num_shards=2, max_seq_length=512, max_predictions_per_seq=76
            ),
        )
    )
    fresh = train(long, tmp_path / "fresh", max_steps=2, batch_size=4)
    phase2 = train(
        long,
        tmp_path / "p2",
        max_steps=2,
        batch_size=4,
        resume=str(ckpt.step_dir(p1, 40)),
        reset_optimizer=True,
    )
    assert [r["step"] for r in phase2] == [1, 2]
    assert phase2[0]["mlm_loss"] < fresh[0]["mlm_loss"] - 0.3  # it kept what phase one learned

    from bertstream.trainer.pretrain.plot import join_phases, plot_run

    train_rows, _, boundaries = join_phases([p1, tmp_path / "p2"])
    assert boundaries == [40] and [r["step"] for r in train_rows][-3:] == [40, 41, 42]
    assert plot_run([p1, tmp_path / "p2"], tmp_path / "phases.png").read_bytes()[:4] == b"\x89PNG"


def test_export_hf_cli_loads_in_transformers_with_identical_logits(demo_shards, tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertstream.trainer.data import DataConfig, PretrainingLoader
    from bertstream.trainer.model import BertConfig, BertForPreTraining

    train(demo_shards, tmp_path / "run", max_steps=6, checkpoint_every=6)
    out = tmp_path / "hf"
    p = cli("export-hf", str(ckpt.step_dir(tmp_path / "run", 6)), str(out))
    assert p.wait(timeout=300) == 0, p.stdout.read()
    hf, info = transformers.BertForPreTraining.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    loaded = ckpt.load(ckpt.step_dir(tmp_path / "run", 6))
    ours = BertForPreTraining(BertConfig.from_dict(loaded.config["model"]))
    ours.load_state_dict(loaded.model)
    ours.eval()
    hf.eval()
    batch = next(
        iter(
            PretrainingLoader(
                DataConfig(paths=(str(demo_shards),), batch_size=4, shuffle=False), expected_vocab_sha256=None
            )
        )
    )
    with torch.no_grad():
        mlm, nsp = ours.logits(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        theirs = hf(
            input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
        )
    real = batch["attention_mask"].bool()
    assert (mlm[real] - theirs.prediction_logits[real]).abs().max() <= 1e-4
    assert (nsp - theirs.seq_relationship_logits).abs().max() <= 1e-4
    assert (out / "vocab.txt").read_text() == (demo_shards / "vocab.txt").read_text()


def test_init_from_encoder_only_hf_folder_reports_fresh_heads(demo_shards, tmp_path, capfd):
    transformers = pytest.importorskip("transformers")
    vocab_size = len((demo_shards / "vocab.txt").read_text().splitlines())
    config = transformers.BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256
    )
    transformers.BertModel(config).save_pretrained(tmp_path / "enc")
    shutil.copy(demo_shards / "vocab.txt", tmp_path / "enc")  # --init-from checks the data's vocabulary against it
    train(demo_shards, tmp_path / "run", max_steps=2, init_from=str(tmp_path / "enc"))
    err = capfd.readouterr().err
    assert "cls.predictions" in err and "cls.seq_relationship" in err


def test_errors_name_what_is_wrong(demo_shards, tmp_path):
    with pytest.raises(UsageError, match="reset_optimizer: needs --resume PATH"):
        TrainConfig.build(paths=("x",), output="y", reset_optimizer=True)
    with pytest.raises(UsageError, match="batch_size: must be an integer >= 1"):
        TrainConfig.build(paths=("x",), output="y", batch_size=0)
    other = tmp_path / "other"
    shutil.copytree(demo_shards, other)
    # A checkpoint trained on another vocabulary cannot continue on this data.
    run = tmp_path / "run"
    train(demo_shards, run, max_steps=2, checkpoint_every=2)
    state = json.loads((ckpt.step_dir(run, 2) / "config.json").read_text())
    state["vocab_sha256"] = "0" * 64
    (ckpt.step_dir(run, 2) / "config.json").write_text(json.dumps(state))
    with pytest.raises(RunError, match="another vocabulary"):
        train(other, run, max_steps=4)


def test_dynamic_masking_run_resumes_mid_epoch_with_the_same_masks(demo_shards, tmp_path):
    kw = {"masking": "dynamic", "mlm_probability": 0.3, "deterministic": True, "num_workers": 2, "checkpoint_every": 4}
    whole = train(demo_shards, tmp_path / "whole", **kw)
    saved = json.loads((tmp_path / "whole" / "config.json").read_text())
    flags = options.saved_values(TrainConfig, saved["train"])  # (the masking flags are saved in its data section)
    assert flags["masking"] == "dynamic" and flags["mlm_probability"] == 0.3
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    for c in ckpt.list_checkpoints(tmp_path / "cut")[1:]:
        shutil.rmtree(c)  # back to step 4, mid-epoch
    resumed = train(demo_shards, tmp_path / "cut", **kw)
    assert [r["step"] for r in resumed] == list(range(1, 13))
    assert [r["loss"] for r in whole] == [r["loss"] for r in resumed]  # identical, not merely close
    static = train(demo_shards, tmp_path / "static", max_steps=1, deterministic=True)
    assert static[0]["loss"] != whole[0]["loss"]  # the same first batch, other masks
    with pytest.raises(RunError, match=r"--masking static \(the run has dynamic\)"):
        train(demo_shards, tmp_path / "cut", **{**kw, "masking": "static", "mlm_probability": 0.15})


def test_no_nsp_cli_trains_mlm_only_with_whole_word_masks(demo_shards, tmp_path):
    run = tmp_path / "run"
    p = cli(
        *("pretrain", "--data", str(demo_shards), "--output", str(run), "--batch-size", "8", "--max-steps", "3"),
        *("--log-every", "1", "--num-workers", "0", "--no-tensorboard", "--masking", "dynamic", "--whole-word-mask"),
        "--no-nsp",
        env={"OMP_NUM_THREADS": "1"},
    )
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out
    # 3 steps under the default 1,000 warm-up steps: said once, before the run
    assert out.count("warning: --warmup-steps 1000 >= --max-steps 3: the whole run is warm-up") == 1, out
    rows = read_metrics(run)
    assert len(rows) == 3 and all("nsp_loss" not in r and "nsp_accuracy" not in r for r in rows)
    assert all(r["loss"] == r["mlm_loss"] for r in rows)
    saved = options.saved_values(TrainConfig, json.loads((run / "config.json").read_text())["train"])
    assert saved["no_nsp"] and saved["whole_word_mask"] and saved["masking"] == "dynamic"
    # The NSP head never got a gradient: its weights are still the seeded initial ones.
    from safetensors.torch import load_file

    from bertstream.trainer.model import BertConfig, BertForPreTraining

    fresh = BertForPreTraining(BertConfig.from_dict(json.loads((run / "config.json").read_text())["model"]), seed=0)
    trained = load_file(str(ckpt.list_checkpoints(run)[-1] / "model.safetensors"))
    name = next(k for k in trained if "seq_relationship.weight" in k)
    assert torch.equal(trained[name], fresh.state_dict()[name])
    with pytest.raises(UsageError, match="whole_word_mask: needs --masking dynamic"):
        TrainConfig.build(paths=("x",), output="y", whole_word_mask=True)


def test_format_names_how_data_is_read_and_an_eval_set_without_it_is_read_as_it_is(tmp_path):
    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset

    vocab = bert_like_vocab(2000)
    train_dir, eval_dir = tmp_path / "train_wds", tmp_path / "eval_arrow"
    write_dataset(train_dir, make_instances(64, vocab=vocab, seed=1), [32, 32], vocab=vocab, formats=("webdataset",))
    write_dataset(
        eval_dir, make_instances(40, vocab=vocab, seed=2, first_id=1000), [40], vocab=vocab, formats=("arrow",)
    )
    common = ["pretrain", "--format", "webdataset", "--batch-size", "4", "--max-steps", "2", "--num-workers", "0"]
    common += ["--no-tensorboard", "--checkpoint-every", "100", "--model", "tiny"]
    ok = cli(
        *common,
        "--data",
        str(train_dir),
        "--eval-data",
        str(eval_dir),
        "--eval-every",
        "2",
        "--output",
        str(tmp_path / "run"),
        env={"OMP_NUM_THREADS": "1"},
    )
    out = ok.communicate(timeout=600)[0]
    assert ok.returncode == 0, out
    assert f"--eval-data {eval_dir} has no webdataset shards: read as arrow" in out
    assert [r["step"] for r in read_metrics(tmp_path / "run") if r.get("split") == "eval"] == [2]

    bad = cli(*common, "--data", str(eval_dir), "--output", str(tmp_path / "bad"), env={"OMP_NUM_THREADS": "1"})
    out = bad.communicate(timeout=600)[0]
    assert bad.returncode == 1 and "Traceback" not in out, out
    assert "manifest lists no webdataset shards (it has ['arrow']); --format auto reads what each dataset has" in out


def test_a_damaged_state_json_is_refused_in_one_line(demo_shards, tmp_path):
    """state.json is untrusted: a scheduler or data position of other types failed in tracebacks (or, edited, went
    on with another schedule or restarted the data without a word)."""
    run = tmp_path / "run"
    train(demo_shards, run, max_steps=2, checkpoint_every=2)
    path = ckpt.step_dir(run, 2) / "state.json"
    intact = json.loads(path.read_text())
    cases = {
        "scheduler is a string, not an object": lambda s: s.update(scheduler="x"),
        r"scheduler.last_epoch 9 is not the checkpoint's step 2": lambda s: s["scheduler"].update(last_epoch=9),
        "lr_lambdas.0..warmup is a string": lambda s: s["scheduler"]["lr_lambdas"][0].update(warmup="x"),
        "base_lrs .1.0, 1.0. are not this run's peak rates": lambda s: s["scheduler"].update(base_lrs=[1.0, 1.0]),
        "the data position is a str, not an object": lambda s: s.update(data="x"),
        "epoch=None": lambda s: s["data"].pop("epoch"),
        "epoch=1000000000000000000000": lambda s: s["data"].update(epoch=10**21),
        r"data_fingerprint \[1\] is not a string": lambda s: s.update(data_fingerprint=[1]),
    }
    for message, damage in cases.items():
        state = json.loads(json.dumps(intact))
        damage(state)
        path.write_text(json.dumps(state))
        with pytest.raises(RunError, match=message):
            train(demo_shards, run, max_steps=4)
    path.write_text(json.dumps(intact))
    # config.json likewise: a string hidden_size failed in a traceback when the model was built, a dict world_size
    # when the global batch was compared, and a string batch_size was reported as "8 != 8".
    config_file = ckpt.step_dir(run, 2) / "config.json"
    config = json.loads(config_file.read_text())
    for damage, message in (
        ({"model": {**config["model"], "hidden_size": "128"}}, "hidden_size must be a positive integer, got '128'"),
        ({"world_size": {}}, r"world_size \{\} is not a process count"),
    ):
        config_file.write_text(json.dumps({**config, **damage}))
        with pytest.raises(ckpt.CheckpointError, match=message):
            ckpt.load(ckpt.step_dir(run, 2))
    config_file.write_text(json.dumps({**config, "train": {**config["train"], "batch_size": "8"}}))
    with pytest.raises(RunError, match="train batch_size '8' is not a count"):
        train(demo_shards, run, max_steps=4)


def test_damaged_tensors_of_a_checkpoint_are_refused_in_one_line(demo_shards, tmp_path):
    """optimizer.pt, rng.pt and model.safetensors are checked past what torch checks: another shape, a string lr,
    odd betas or an rng state of another type failed in tracebacks; NaN moments or weights read as "training
    diverged ... lower --lr"; int weights were cast silently; a folder renamed to a later step was resumed at its
    own step by every --resume auto (repeating steps)."""
    run = tmp_path / "run"
    train(demo_shards, run, max_steps=2, checkpoint_every=2)
    folder = ckpt.step_dir(run, 2)
    files = {name: (folder / name).read_bytes() for name in ("optimizer.pt", "rng.pt", ckpt.MODEL_FILE)}

    def optimizer(edit):
        state = torch.load(folder / "optimizer.pt")
        edit(state, next(iter(state["state"].values())))
        torch.save(state, folder / "optimizer.pt")

    def weights(edit):
        state = ckpt.read_tensors(folder / ckpt.MODEL_FILE)
        edit(state, next(iter(state)))
        ckpt.write_tensors(folder / ckpt.MODEL_FILE, state, {"format": "pt"})

    cases = [
        (lambda: optimizer(lambda o, p: p.update(exp_avg=torch.zeros(3))), RunError, r"exp_avg .* is \(3,\)"),
        (lambda: optimizer(lambda o, p: p["exp_avg"].fill_(float("nan"))), RunError, "exp_avg .* holds NaN"),
        (lambda: optimizer(lambda o, p: o["param_groups"][0].update(lr="x")), RunError, "lr 'x' is not a learning"),
        (lambda: optimizer(lambda o, p: o["param_groups"][0].update(betas=(5.0, 2.0))), RunError, r"betas \(5.0"),
        (lambda: torch.save({"rank0.torch": torch.zeros(3)}, folder / "rng.pt"), RunError, "generator state"),
        (lambda: weights(lambda w, k: w[k][0].fill_(float("nan"))), ckpt.CheckpointError, "holds NaN or inf"),
        (lambda: weights(lambda w, k: w.update({k: w[k].long()})), ckpt.CheckpointError, "not floating point"),
    ]
    for damage, error, message in cases:
        damage()
        with pytest.raises(error, match=message):
            if error is ckpt.CheckpointError:
                ckpt.load(folder)
            else:
                train(demo_shards, run, max_steps=4)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    renamed = folder.rename(ckpt.step_dir(run, 9))
    with pytest.raises(ckpt.CheckpointError, match="its name says step 9, its state.json step 2"):
        ckpt.load(renamed)
