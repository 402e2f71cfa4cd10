"""The data side's settings declared once for every command (issue 55): ``--num-workers`` (``trainer.data.config.
Workers``: pretraining's ``DataConfig`` is one, fine-tuning holds one as its ``workers`` section), ``--batch-size``
(``trainer.config.DeviceBatch``, the ``batch`` section of the three commands), ``--eval-data``
(``trainer.data.config.EvalSet``, the ``eval_set`` section of both training commands), and a run's config.json saved
in the layout of before still read as the same settings (``--config``, a resume)."""

from __future__ import annotations

import json
import re
from dataclasses import MISSING

import pytest
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.trainer.cli import main
from bertstream.trainer.config import DeviceBatch, TrainConfig
from bertstream.trainer.data.config import IN_MAIN, DataConfig, EvalSet, Workers
from bertstream.trainer.embed import EmbedConfig
from bertstream.trainer.finetune.config import FinetuneConfig

FINE = {"task": "classification", "train_data": "t", "eval_data": "e", "init": "random:tiny", "output": "o"}

# "finetune" of a fine-tuning run's config.json as the layout before these sections saved it (6001fe2)
FINETUNE_SAVED = {
    "task": "classification",
    "train_data": "t",
    "eval_data": "e",
    "init": "random:tiny",
    "run": {
        "output": "o",
        "seed": 0,
        "precision": "auto",
        "log_every": 50,
        "tensorboard": True,
        "report_to": "tensorboard",
        "device": "auto",
        "async_checkpoint": True,
        "threads": 0,
        "dist_timeout": 300.0,
    },
    "resume": "none",
    "epochs": 3,
    "dropout": None,
    "pooling": "cls",
    "batch_size": 8,
    "grad_accum": 1,
    "eval_batch_size": 0,
    "optim": {
        "lr": 5e-05,
        "weight_decay": 0.01,
        "adam_eps": 1e-06,
        "max_grad_norm": 1.0,
        "optimizer": "adamw",
        "lr_schedule": "linear",
        "optimizer_settings": None,
        "warmup_ratio": 0.1,
        "layer_decay": 1.0,
    },
    "max_steps": 0,
    "eval_every": 0,
    "patience": 0,
    "num_workers": 3,
    "label_names": None,
    "max_answer_length": 30,
    "n_best": 20,
}


# "train" of a pretraining run's config.json as saved before (6001fe2): the batch at the top, the workers in the
# data section
PRETRAIN_SAVED = {
    "data": {
        "paths": ["ds"],
        "format": "auto",
        "shuffle": True,
        "shuffle_buffer": 10000,
        "num_workers": 1,
        "prefetch_factor": 2,
        "pin_memory": False,
        "length_bucketing": False,
        "bucket_batches": 16,
        "drop_remainder": True,
        "skip_corrupt": False,
        "verify": "sha256",
        "weights": None,
        "masking": "static",
        "mlm_probability": 0.15,
        "max_predictions": None,
        "whole_word_mask": False,
    },
    "eval_data": "ev",
    "model": {"preset": "tiny", "model_config": None, "norm_placement": None, "init_from": None, "dropout": None},
    "run": {
        "output": "run",
        "seed": 0,
        "precision": "auto",
        "log_every": 10,
        "tensorboard": True,
        "report_to": "tensorboard",
        "device": "auto",
        "async_checkpoint": True,
        "threads": 0,
        "dist_timeout": 300.0,
    },
    "batch_size": 4,
    "grad_accum": 1,
    "max_steps": 10000,
    "max_minutes": 0.0,
    "optim": {
        "lr": 0.0001,
        "weight_decay": 0.01,
        "adam_eps": 1e-06,
        "max_grad_norm": 1.0,
        "optimizer": "adamw",
        "lr_schedule": "linear",
        "optimizer_settings": None,
        "warmup_steps": 1000,
    },
    "compile": None,
    "compile_mode": "default",
    "eval_every": 500,
    "eval_batches": 0,
    "checkpoint": {
        "checkpoint_every": 1000,
        "keep_checkpoints": 3,
        "resume": "auto",
        "reset_optimizer": False,
        "overwrite": False,
    },
    "deterministic": False,
    "unpad": True,
    "objective": {"no_nsp": False},
}


def test_num_workers_is_declared_once_for_both_commands():
    by_command = {
        cls: [leaf for leaf in options.leaves(cls) if leaf.name == "num_workers"]
        for cls in (TrainConfig, FinetuneConfig)
    }
    assert all(len(found) == 1 for found in by_command.values())
    fields = {found[0].field for found in by_command.values()}
    assert len(fields) == 1 and fields == {Workers.__dataclass_fields__["num_workers"]}  # one declaration
    pre, fine = TrainConfig.build(paths=("d",), output="o"), FinetuneConfig.build(**FINE, num_workers=2)
    assert (pre.data.num_workers, fine.workers.num_workers) == (2, 2)  # pretraining's default 2, fine-tuning's 0 given
    assert isinstance(pre.data, Workers) and FinetuneConfig.build(**FINE).workers == IN_MAIN
    for cls, given in ((TrainConfig, {"paths": ("d",), "output": "o"}), (FinetuneConfig, FINE)):
        with pytest.raises(UsageError, match="num_workers: must be an integer >= 0, got -1"):
            cls.build(**given, num_workers=-1)


def test_the_workers_section_says_who_reads_for_the_data_loader():
    assert Workers(num_workers=3).lanes == 3 and IN_MAIN.lanes == 1  # the main process reads one lane
    settings = Workers(num_workers=3).loader_settings(prefetch_factor=4)
    assert (settings["num_workers"], settings["prefetch_factor"]) == (3, 4)
    assert (IN_MAIN.loader_settings()["num_workers"], IN_MAIN.loader_settings()["prefetch_factor"]) == (0, None)
    assert DataConfig(paths=("d",), batch_size=4, num_workers=2).loader_settings()["num_workers"] == 2


def test_a_finetune_config_json_of_the_earlier_layout_reads_as_the_same_settings():
    cfg = FinetuneConfig.build(**options.saved_values(FinetuneConfig, FINETUNE_SAVED))
    assert cfg.workers.num_workers == 3
    assert options.flat(cfg)["num_workers"] == 3 and "num_workers" not in cfg.to_dict()  # now in its section
    assert cfg.to_dict()["workers"] == {"num_workers": 3}


def test_batch_size_is_declared_once_for_the_three_commands_with_each_ones_default_help_and_tags():
    commands = (TrainConfig, FinetuneConfig, EmbedConfig)
    found = {cls: [leaf for leaf in options.leaves(cls) if leaf.name == "batch_size"] for cls in commands}
    assert all(len(leaves) == 1 for leaves in found.values())
    assert {leaves[0].field for leaves in found.values()} == {DeviceBatch.__dataclass_fields__["batch_size"]}
    pre, fine, emb = (found[cls][0] for cls in commands)
    assert (pre.default, fine.default, emb.default) == (32, 32, 64)
    assert (pre.help, fine.help, emb.help) == (
        "Sequences per device and micro-step.",
        "Rows per device and batch.",
        None,
    )
    # fine-tuning's resume keeps its batch; pretraining's may change it with the processes (elastic resume)
    assert options.FIXED in fine.tags and options.FIXED not in pre.tags | emb.tags
    assert "batch_size" in options.tagged(FinetuneConfig, options.FIXED)
    assert "batch_size" not in options.tagged(TrainConfig, options.FIXED)
    for cls, given in ((TrainConfig, {"paths": ("d",), "output": "o"}), (FinetuneConfig, FINE)):
        with pytest.raises(UsageError, match="batch_size: must be an integer >= 1, got 0"):
            cls.build(**given, batch_size=0)
    with pytest.raises(UsageError, match="batch_size: must be an integer >= 1, got 0"):
        options.build(EmbedConfig, init="i", input="x", output="o", batch_size=0)


def test_embed_reads_its_rows_in_chunks_of_the_batch():
    assert DeviceBatch(batch_size=4).chunks(10) == [slice(0, 4), slice(4, 8), slice(8, 12)]
    assert DeviceBatch(batch_size=4).chunks(0) == []
    emb = options.build(EmbedConfig, init="i", input="x", output="o")
    assert options.flat(emb)["batch_size"] == 64  # the output's metadata names every setting by its flag, as before


def test_a_pretraining_config_json_of_the_earlier_layout_reads_as_the_same_settings():
    saved = TrainConfig.build(paths=("ds",), output="run", batch_size=4, num_workers=1).to_dict()
    assert saved["batch"] == {"batch_size": 4} and "batch_size" not in saved["data"] and "batch_size" not in saved
    cfg = TrainConfig.build(**options.saved_values(TrainConfig, PRETRAIN_SAVED))
    assert (cfg.batch.batch_size, cfg.data.batch_size, cfg.data.num_workers, cfg.steps.rows) == (4, 4, 1, 4)
    assert cfg.eval_set.eval_data == "ev"
    fine = FinetuneConfig.build(**options.saved_values(FinetuneConfig, FINETUNE_SAVED))
    assert (fine.batch.batch_size, fine.steps.rows, fine.eval_batch) == (8, 8, 16)
    assert fine.eval_set.eval_data == "e" and options.flat(fine)["eval_data"] == "e"


def test_a_checkpoint_saved_with_the_earlier_layout_resumes_as_the_run_would_have_gone_on(tmp_path):
    from bertstream.trainer.checkpoint import step_dir
    from bertstream.trainer.errors import RunError
    from tests.trainer.test_run_safety import run, small_dataset

    data = small_dataset(tmp_path / "ds", n=32)
    straight = run(data, tmp_path / "straight", max_steps=4)
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    config_file = step_dir(out, 2) / "config.json"
    saved = json.loads(config_file.read_text())
    train = {k: v for k, v in saved["train"].items() if k != "batch"}
    saved["train"] = {**train, "batch_size": saved["train"]["batch"]["batch_size"]}  # where the batch was saved
    config_file.write_text(json.dumps(saved))
    with pytest.raises(RunError, match=r"needs its global batch \(processes x --batch-size\): the run has 1 x 4 = 4"):
        run(data, out, max_steps=4, batch_size=8)
    resumed = run(data, out, max_steps=4)
    assert [(r["step"], r["loss"]) for r in resumed][-2:] == [(r["step"], r["loss"]) for r in straight][-2:]


def test_eval_data_is_declared_once_for_both_training_commands_required_by_fine_tuning_alone():
    found = {
        cls: [leaf for leaf in options.leaves(cls) if leaf.name == "eval_data"] for cls in (TrainConfig, FinetuneConfig)
    }
    assert all(len(leaves) == 1 for leaves in found.values())
    assert {leaves[0].field for leaves in found.values()} == {EvalSet.__dataclass_fields__["eval_data"]}
    pre, fine = found[TrainConfig][0], found[FinetuneConfig][0]
    assert pre.default is None and fine.default is MISSING  # fine-tuning's command line requires it
    assert (pre.help, fine.help) == (
        "Evaluation dataset folder.",
        "Evaluation task dataset folder (same vocab and label list).",
    )
    assert options.FIXED in fine.tags and options.FIXED not in pre.tags
    assert TrainConfig.build(paths=("d",), output="o").eval_set.folders == ()
    with pytest.raises(UsageError, match="eval_data: is required"):
        FinetuneConfig.build(**{k: v for k, v in FINE.items() if k != "eval_data"})
    with pytest.raises(UsageError, match=r"eval_data: names no folder \(''\)"):
        TrainConfig.build(paths=("d",), output="o", eval_data="")
    result = CliRunner().invoke(
        main, ["finetune", "--task", "ner", "--train-data", "t", "--init", "i", "--output", "o"]
    )
    assert result.exit_code == 2 and "Missing option '--eval-data'" in result.output


def test_the_eval_set_words_what_the_runs_say_of_it(tmp_path):
    ev = EvalSet(eval_data=str(tmp_path / "ds"))
    assert ev.input_path() == ("--eval-data", str(tmp_path / "ds")) and ev.named() == ("--eval-data", ev.folders)
    said = ev.also_training([str(tmp_path / "ds") + "/"], "--data", "its figures measure the training set")
    assert said == f"warning: --eval-data {tmp_path / 'ds'} is also --data: its figures measure the training set"
    assert (
        ev.also_training([str(tmp_path / "other")], "--data", "x") is None
        and EvalSet().also_training(["a"], "--data", "x") is None
    )


def test_a_fine_tuning_resume_of_the_earlier_layout_keeps_its_batch_and_eval_set(tmp_path):
    from types import SimpleNamespace

    from bertstream.trainer.errors import RunError
    from bertstream.trainer.finetune.resume import check_resume

    restored = SimpleNamespace(config={"finetune": FINETUNE_SAVED}, path=tmp_path / "run" / "resume")
    start = SimpleNamespace(restored=restored, run_dir=tmp_path / "run")
    same = options.saved_values(FinetuneConfig, FINETUNE_SAVED)
    check_resume(FinetuneConfig.build(**same), start)  # the same flags: it goes on
    for changed, said in (
        ({"batch_size": 16}, "--batch-size 16 (the run has 8)"),
        ({"eval_data": "x"}, "--eval-data x"),
    ):
        with pytest.raises(RunError, match=re.escape(said)):
            check_resume(FinetuneConfig.build(**{**same, **changed}), start)
    check_resume(FinetuneConfig.build(**{**same, "num_workers": 1}), start)  # the workers may change
