"""The data side's settings declared once for every command (issue 55): ``--num-workers`` (``trainer.data.config.
Workers``: pretraining's ``DataConfig`` is one, fine-tuning holds one as its ``workers`` section), and a run's
config.json saved in the layout of before still read as the same settings (``--config``, a resume)."""

from __future__ import annotations

import pytest

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data.config import IN_MAIN, DataConfig, Workers
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
