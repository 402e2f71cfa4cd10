"""Elastic resume (issue: weighted mixing and elastic resume, section 3): a run checkpointed by W ranks x B
per rank continues on W' x B' with W*B == W'*B', with the same global batches and the same losses, and with
another --num-workers. The runs read a weighted mix of two folders (section 2), so the mix resumes too.

The killed runs are really SIGKILLed (trainer, ranks and loader workers) once their mid-epoch checkpoint is
complete; the resumed run continues from that checkpoint, with another --num-workers than the killed run. The learning rate stays in its warm-up (which does
not depend on --max-steps), so the killed runs can be given more steps than the reference run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset
from bertstream.cli.errors import UsageError
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import read_metrics
from bertstream.trainer.pretrain.loop import pretrain
from tests.beam_services import free_port
from tests.processes import run_launch

STEPS, CHECKPOINT = 14, 6  # an epoch of the mix is 12 steps: step 6 is mid-epoch, step 14 in the next epoch
ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("elastic")
    vocab = bert_like_vocab(1200)
    for name, n, first, parts in (("wiki", 60, 0, [7, 40, 13]), ("books", 30, 5000, [30])):
        inst = make_instances(n, vocab=vocab, seed=len(name), max_len=32, max_masked=5, first_id=first)
        write_dataset(root / name, inst, parts, vocab=vocab, formats=("arrow",), parameters={"max_seq_length": 32})
    (root / "model.json").write_text(json.dumps({"hidden_dropout": 0.0, "attention_dropout": 0.0}))
    # wiki weighs most: an epoch reads its 60 once and 40 of books (wrapping): 100 samples, 12 steps of 8.
    data = (f"{root / 'wiki'}:0.6", f"{root / 'books'}:0.4")
    flags = {
        "--max-steps": str(STEPS),
        "--log-every": "1",
        "--warmup-steps": "100",
        "--lr": "1e-2",
        "--checkpoint-every": str(CHECKPOINT),
        "--model-config": str(root / "model.json"),
        "--seed": "4",
    }
    whole = root / "whole"
    pretrain(config(data, whole, flags, batch_size=8, num_workers=2))
    return {"root": root, "data": data, "flags": flags, "whole": read_metrics(whole), "whole_dir": whole}


def config(data: tuple[str, ...], out: Path, flags: dict, **kw) -> TrainConfig:
    return TrainConfig.build(
        paths=data,
        output=str(out),
        max_steps=STEPS,
        log_every=1,
        warmup_steps=int(flags["--warmup-steps"]),
        lr=float(flags["--lr"]),
        checkpoint_every=CHECKPOINT,
        model_config=flags["--model-config"],
        seed=int(flags["--seed"]),
        tensorboard=False,
        **kw,
    )


def argv(setup: dict, out: Path, *, ranks: int, batch: int, workers: int, **over: str) -> list[str]:
    launch = [sys.executable, "-m", "bertstream.trainer"]
    if ranks > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
                  str(free_port()), "-m", "bertstream.trainer"]  # fmt: skip
    flags = {**setup["flags"], "--batch-size": str(batch), "--num-workers": str(workers), **over}
    data = [a for d in setup["data"] for a in ("--data", d)]
    return [*launch, "pretrain", *data, "--output", str(out), "--no-tensorboard",
            *[x for kv in flags.items() for x in kv]]  # fmt: skip


def killed_at_checkpoint(setup: dict, out: Path, *, ranks: int, batch: int, workers: int) -> Path:
    """Run with many more steps and SIGKILL the whole process group once step CHECKPOINT is saved."""
    p = subprocess.Popen(
        argv(setup, out, ranks=ranks, batch=batch, workers=workers, **{"--max-steps": "400"}),
        env={**os.environ, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if any(c.name == f"step-{CHECKPOINT:07d}" for c in ckpt.list_checkpoints(out)):
            break
        time.sleep(0.05)
    assert p.poll() is None, p.stderr.read()  # still running: killed mid-run, not finished
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    rows = read_metrics(out)
    assert len(rows) < 400
    return ckpt.step_dir(out, CHECKPOINT)


def assert_continues(setup: dict, resumed: Path) -> None:
    rows = [r for r in read_metrics(resumed) if r.get("split", "train") == "train"]
    whole = {r["step"]: r for r in setup["whole"]}
    assert [r["step"] for r in rows] == list(range(CHECKPOINT + 1, STEPS + 1))
    for r in rows:
        assert r["loss"] == pytest.approx(whole[r["step"]]["loss"], rel=1e-5), r["step"]
        assert r["mlm_accuracy"] == pytest.approx(whole[r["step"]]["mlm_accuracy"], abs=1e-9)
        assert r["samples_by_dataset"] == whole[r["step"]]["samples_by_dataset"]
    assert rows[-1]["epoch"] == 1


@pytest.mark.slow  # two launches under torchrun: about 20 s on 2 busy cores
def test_two_ranks_killed_mid_epoch_resume_on_one_rank_with_twice_the_batch(setup, tmp_path):
    saved = killed_at_checkpoint(setup, tmp_path / "two", ranks=2, batch=4, workers=2)
    state = json.loads((saved / "state.json").read_text())["data"]
    assert (state["epoch"], state["samples_consumed"], state["global_batch_size"]) == (0, CHECKPOINT * 8, 8)
    pretrain(config(setup["data"], tmp_path / "one", setup["flags"], batch_size=8, num_workers=0, resume=str(saved)))
    assert_continues(setup, tmp_path / "one")


@pytest.mark.slow
def test_one_rank_killed_mid_epoch_resumes_on_two_ranks_with_half_the_batch(setup, tmp_path):
    saved = killed_at_checkpoint(setup, tmp_path / "one", ranks=1, batch=8, workers=2)
    out = tmp_path / "two"
    two = run_launch(
        argv(setup, out, ranks=2, batch=4, workers=1, **{"--resume": str(saved)}), env={**os.environ, **ENV}
    )
    assert two.returncode == 0, two.stdout + two.stderr
    assert "1 processes saved step-0000006, 2 resume it" in two.stderr
    assert_continues(setup, out)


def test_a_resume_with_another_global_batch_is_refused_naming_both(setup, tmp_path):
    saved = ckpt.step_dir(setup["whole_dir"], CHECKPOINT)
    with pytest.raises(RunError, match=r"global batch .*: the run has 1 x 8 = 8, this resume 1 x 4 = 4$"):
        pretrain(config(setup["data"], tmp_path / "r", setup["flags"], batch_size=4, resume=str(saved)))
    cli = subprocess.run(
        argv(setup, tmp_path / "c", ranks=1, batch=2, workers=0, **{"--resume": str(saved)}),
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 1
    assert cli.stderr.strip().splitlines()[-1].endswith("the run has 1 x 8 = 8, this resume 1 x 2 = 2")
    assert "Traceback" not in cli.stderr


def test_changed_weights_do_not_continue_the_data_position(setup, tmp_path):
    saved = ckpt.step_dir(setup["whole_dir"], CHECKPOINT)
    other = tuple(d.rsplit(":", 1)[0] + ":0.5" for d in setup["data"])
    with pytest.raises(RunError, match=r"data position does not fit this run .*order.*weights"):
        pretrain(config(other, tmp_path / "r", setup["flags"], batch_size=8, resume=str(saved)))


def test_data_weights_in_the_train_config(tmp_path):
    cfg = TrainConfig.build(paths=("s3://b/wiki:0.7", "books:0.3"), output="x")
    assert (cfg.data.paths, cfg.data.weights) == (("s3://b/wiki", "books"), (0.7, 0.3))
    assert TrainConfig.build(paths=("a", "b"), output="x").data.weights is None
    with pytest.raises(UsageError, match="give every --data a weight"):
        TrainConfig.build(paths=("a:1", "b"), output="x")
    with pytest.raises(UsageError, match="the same dataset is given more than once"):
        TrainConfig.build(paths=("a:1", "./a:2"), output="x")
