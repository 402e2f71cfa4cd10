"""Run management of ``berttrain pretrain``: one run per folder, every input checked before step 1, resumes
that continue exactly the run they say they continue (issue 13, section 1)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset
from bertstream.cli.errors import UsageError
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import rundir
from bertstream.trainer.checkpoint import CheckpointError
from bertstream.trainer.config import CheckpointConfig, TrainConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import read_metrics
from bertstream.trainer.pretrain.loop import pretrain
from bertstream.trainer.run_folder import RunFolder, check_overlap, plan_run


def small_dataset(root: Path, *, n: int = 96, vocab_size: int = 1200, seed: int = 0, max_seq_length: int = 32) -> Path:
    vocab = bert_like_vocab(vocab_size)
    write_dataset(
        root,
        make_instances(n, vocab=vocab, seed=seed, max_len=32, max_masked=5),
        [n // 2, n - n // 2],
        vocab=vocab,
        formats=("arrow",),
        parameters={"max_seq_length": max_seq_length, "max_predictions_per_seq": 5, "seed": seed},
    )
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return small_dataset(tmp_path_factory.mktemp("safety") / "ds")


def run(data: Path | str, out: Path, **kw) -> list[dict]:
    cfg = TrainConfig.build(
        **{
            "paths": (str(data),),
            "output": str(out),
            "batch_size": 4,
            "max_steps": 4,
            "warmup_steps": 1,
            "log_every": 1,
            "checkpoint_every": 2,
            "num_workers": 0,
            "tensorboard": False,
            "lr": 1e-3,
            **kw,
        }
    )
    pretrain(cfg)
    return [r for r in read_metrics(out) if r.get("split", "train") == "train"]


def test_resume_none_into_a_used_folder_is_refused_and_overwrite_clears_it_whole(data, tmp_path):
    out = tmp_path / "run"
    run(data, out, max_steps=4)
    with pytest.raises(UsageError, match="already holds a run .*--resume none starts a new run: pass --overwrite"):
        run(data, out, resume="none", max_steps=1)
    assert [c.name for c in ckpt.list_checkpoints(out)] == ["step-0000002", "step-0000004"]  # untouched
    rows = run(data, out, resume="none", overwrite=True, max_steps=1, checkpoint_every=1)
    assert [r["step"] for r in rows] == [1]
    assert [c.name for c in ckpt.list_checkpoints(out)] == ["step-0000001"]  # no checkpoint of the old run left


def test_a_folder_without_a_checkpoint_to_resume_is_refused(data, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("someone else's files")
    with pytest.raises(UsageError, match=r"no complete checkpoint to continue \(--resume auto.*\): pass --overwrite"):
        run(data, out)
    assert (out / "notes.txt").exists()


def test_eval_data_is_checked_before_step_1(data, tmp_path):
    other_vocab = small_dataset(tmp_path / "other", vocab_size=1300)
    tiny = small_dataset(tmp_path / "tiny", n=3)
    cases = [
        (tmp_path / "missing", FileNotFoundError, "no manifest"),
        (other_vocab, RunError, "--eval-data .* another vocabulary"),
        (tiny, RunError, "--eval-data: 3 usable instances are fewer than one global batch"),
    ]
    for i, (eval_data, error, message) in enumerate(cases):
        out = tmp_path / f"run{i}"
        with pytest.raises(error, match=message):
            run(data, out, eval_data=str(eval_data), max_steps=2)
        assert not (out / "metrics.jsonl").exists(), eval_data  # refused before step 1: nothing trained


def test_resume_checkpoint_is_checked_before_step_1(data, tmp_path):
    with pytest.raises(RunError, match="--resume .*: no such checkpoint folder"):
        run(data, tmp_path / "run", resume=str(tmp_path / "nope"))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_sequence_length_is_checked_against_the_model_positions_at_start(tmp_path):
    long = small_dataset(tmp_path / "long", max_seq_length=1024)  # tiny preset: 512 positions
    with pytest.raises(RunError, match=r"up to 1024 tokens .* 512 positions \(max_position_embeddings\)"):
        run(long, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_resume_refuses_changed_flags_by_name(data, tmp_path):
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    with pytest.raises(
        RunError,
        match=r"--model mini \(the run has tiny\); --lr 0.005 \(the run has 0.001\).*"
        r"--reset-optimizer",
    ):
        run(data, out, max_steps=2, lr=5e-3, preset="mini")
    with pytest.raises(RunError, match="--max-steps 1 is below step 2"):
        run(data, out, max_steps=1)


def test_a_larger_max_steps_extends_a_finished_schedule(data, tmp_path, capfd):
    out = tmp_path / "run"
    first = run(data, out, max_steps=4)
    assert first[-1]["lr"] == 0.0  # the schedule ended
    rows = run(data, out, max_steps=8)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert all(r["lr"] > 0 for r in rows[4:7]) and rows[-1]["lr"] == 0.0  # decays again, to 0 at the new end
    # The same schedule as a run planned for 8 steps from the start.
    planned = run(data, tmp_path / "planned", max_steps=8)
    assert [r["lr"] for r in rows[4:]] == pytest.approx([r["lr"] for r in planned[4:]])
    assert "the linear decay now ends at step 8 (was 4)" in capfd.readouterr().err


def test_the_same_dataset_spelled_or_placed_differently_keeps_the_data_position(data, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(data.parent)
    out = tmp_path / "run"
    run("ds", out, max_steps=2, checkpoint_every=1)
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)  # a copy of the same shards: same content, another path
    for step, spelling in ((3, "./ds/"), (4, str(moved))):
        capfd.readouterr()
        run(spelling, out, max_steps=step, checkpoint_every=1)
        assert "new --data" not in capfd.readouterr().err, spelling
        state = json.loads((ckpt.step_dir(out, step) / "state.json").read_text())
        assert state["data"]["batches_consumed"] == step, spelling  # continued, not restarted (no repeats)
    with pytest.raises(UsageError, match="the same dataset is given more than once: ./ds/, ds"):
        TrainConfig.build(paths=("ds", "./ds/"), output="x")


@pytest.mark.parametrize("missing", ["rng.pt", "optimizer.pt"])
def test_an_incomplete_checkpoint_is_refused_by_name(data, tmp_path, missing):
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    path = ckpt.step_dir(out, 2)
    (path / missing).unlink()
    with pytest.raises(CheckpointError, match=f"incomplete checkpoint, lacks {missing}; .*--reset-optimizer"):
        run(data, tmp_path / "next", resume=str(path), max_steps=4)
    # --resume auto skips it; with no other checkpoint the folder is not resumable and is not reused silently.
    with pytest.raises(UsageError, match="no complete checkpoint"):
        run(data, out, max_steps=4)
    # Its weights still start a new phase.
    rows = run(data, tmp_path / "phase2", resume=str(path), reset_optimizer=True, max_steps=1)
    assert [r["step"] for r in rows] == [1]


def test_reset_optimizer_into_the_run_folder_it_starts_from_is_refused(data, tmp_path):
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    with pytest.raises(RunError, match="--reset-optimizer starts a new phase"):
        run(data, out, resume=str(ckpt.step_dir(out, 2)), reset_optimizer=True)


def test_device_names_are_checked(tmp_path):
    with pytest.raises(UsageError, match="device: must be auto, cpu, cuda or cuda:N, got 'tpu'"):
        TrainConfig.build(paths=("x",), output="y", device="tpu")
    if not __import__("torch").cuda.is_available():
        from bertstream.trainer import distributed as D

        with pytest.raises(RunError, match="--device cuda: no CUDA GPU is visible"):
            D.setup("cuda")


def test_checkpoint_state_has_the_dataset_content_identity(data, tmp_path):
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    state = json.loads((ckpt.step_dir(out, 2) / "state.json").read_text())
    assert len(state["data_fingerprint"]) == 16 and state["data_paths"] == [str(data)]
    assert os.path.isdir(ckpt.step_dir(out, 2))


def test_a_new_phase_refuses_flags_it_would_ignore(data, tmp_path):
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    path = str(ckpt.step_dir(out, 2))
    with pytest.raises(RunError, match=r"--model mini \(the checkpoint has tiny\)"):
        run(data, tmp_path / "p2", resume=path, reset_optimizer=True, preset="mini")
    with pytest.raises(RunError, match="--init-from .* and --resume .* both give the starting weights"):
        run(data, tmp_path / "p2", resume=path, reset_optimizer=True, init_from=str(tmp_path))


def test_a_metrics_line_torn_by_a_kill_does_not_stop_the_resume(data, tmp_path):
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "lo')  # the process died mid-write
    rows = run(data, out, max_steps=4)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]


def test_a_run_folder_in_use_is_locked_even_against_overwrite(data, tmp_path):
    """Commands own what they write (issue 33): a second run into a folder that a run is writing (here: this
    process holds its lock, as a running pretrain does) is refused before it reads or clears anything."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    with rundir.locked(out, "berttrain pretrain"):
        with pytest.raises(UsageError, match=f"{out} is being written by another run \\(berttrain pretrain, pid"):
            run(data, out, overwrite=True, max_steps=1)
        assert (out / "metrics.jsonl").read_text() == '{"step": 1, "loss": 1.0}\n'  # not cleared
    assert not (out / rundir.LOCK_NAME).exists()  # released
    assert [r["step"] for r in run(data, out, overwrite=True, max_steps=1)] == [1]  # free again: --overwrite clears
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # the run's lock is gone with it


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_layers": 10**6}, "parameters .* need [0-9,]+ GiB in fp32 alone, more than this machine's"),
        ({"hidden_size": 10**9, "num_heads": 1}, "parameters .* need [0-9,]+ GiB in fp32 alone"),
        ({"vocab_size": 50}, "vocab_size 50 is not the data's vocabulary \\(1200 tokens\\)"),
        ([1, 2], "holds list, not an object of BertConfig fields"),
    ],
)
def test_a_model_config_is_sized_and_used_before_anything_is_allocated(data, tmp_path, overrides, message):
    """Every loop and allocation is bounded; every argument used or refused (issue 33): num_layers 10**6 hung,
    hidden_size 10**9 asked for terabytes, a vocab_size was silently replaced by the data's."""
    path = tmp_path / "model.json"
    path.write_text(json.dumps(overrides))
    with pytest.raises(RunError, match=f"--model-config {path}: .*{message}"):
        run(data, tmp_path / "run", model_config=str(path))
    assert not (tmp_path / "run").exists()


def test_grad_accum_past_one_epoch_is_refused_as_a_batch_past_the_data_is(data, tmp_path):
    with pytest.raises(RunError, match="--grad-accum 1000000: one optimizer step would take 1000000 global batches"):
        run(data, tmp_path / "run", grad_accum=10**6)
    assert not (tmp_path / "run").exists()


def test_how_a_run_starts_is_decided_once_from_the_folder_and_the_checkpoint_flags(data, tmp_path):
    """``run_folder.plan_run`` turns --output, --resume, --reset-optimizer and --overwrite into a ``Start``, which the
    loop, restore and the inputs take: a resume continues its checkpoint, a new phase takes its weights only, an
    --overwrite starts afresh."""
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    path = str(ckpt.step_dir(out, 2))
    resumed = plan_run(out, RunFolder(output=str(out)), CheckpointConfig(), data=())
    assert resumed.run_dir == out and resumed.continued is not None and resumed.continued.step == 2
    phase = plan_run(
        tmp_path / "p2", RunFolder(output="p2", resume=path), CheckpointConfig(reset_optimizer=True), data=()
    )
    assert phase.new_phase and phase.continued is None and phase.restored is not None and phase.restored.step == 2
    fresh = plan_run(out, RunFolder(output=str(out), overwrite=True), CheckpointConfig(), data=())
    assert fresh.restored is None and fresh.overwrite
    with pytest.raises(UsageError, match=r"--init-from .* lies inside it"):  # what --overwrite would delete
        check_overlap(fresh, [("--init-from", path), ("--eval-data", None), ("--model-config", "s3://b/c")])


def test_another_rank_taking_the_lock_is_not_a_run_in_the_folder(tmp_path):
    """Rank 1 of a launch plans while rank 0 takes the lock (``.berttrain.lock.RUN.tmp``, then the link): a
    folder holding only that is a fresh one, not "other files" (one rank of two was refused so, now and then)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / f"{rundir.LOCK_NAME}.1234-abcd.tmp").write_text("{}")
    (run / rundir.LOCK_NAME).write_text("{}")
    assert plan_run(run, RunFolder(output=str(run)), CheckpointConfig(), data=()).restored is None
    (run / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="notes.txt"):
        plan_run(run, RunFolder(output=str(run)), CheckpointConfig(), data=())


def test_an_elastic_restart_takes_over_its_own_lock_from_another_host(tmp_path, monkeypatch, capsys):
    """Issue 48, item 5: c10d may place rank 0 on another host after a crash; the lock of the run's previous
    incarnation (same --rdzv-id, an earlier restart) was held under the first host's name, where its pid cannot
    be checked, and refused the relaunch until someone removed it. Another launch, or a lock of this restart or
    a later one, is still refused: two runs never write one folder."""
    out = tmp_path / "run"
    out.mkdir()
    held = {"run_id": "1-ab", "pid": 1, "host": "gone-host", "command": "berttrain pretrain", "started": "then"}
    lock = out / rundir.LOCK_NAME
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    for holder in ({**held, "launch": "job8", "restart": 0}, {**held, "launch": "job7", "restart": 1}, held):
        lock.write_text(json.dumps(holder))
        with pytest.raises(UsageError, match="is being written by another run .* on gone-host"):
            with rundir.locked(out, "berttrain pretrain"):
                pass
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default id: shared by unrelated launches
    lock.write_text(json.dumps({**held, "launch": "none", "restart": 0}))
    with pytest.raises(UsageError, match="is being written by another run"):
        with rundir.locked(out, "berttrain pretrain"):
            pass
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    lock.write_text(json.dumps({**held, "launch": "job7", "restart": 0}))
    with rundir.locked(out, "berttrain pretrain"):
        mine = json.loads(lock.read_text())
        assert (mine["launch"], mine["restart"], mine["pid"]) == ("job7", 1, os.getpid())
    assert not lock.exists()  # released at the end, as ever
    assert "taking over the lock of launch job7 from its restart 0 on gone-host" in capsys.readouterr().err


def test_overwrite_refuses_a_folder_that_holds_no_run(data, tmp_path):
    """Issue 53: ``pretrain --overwrite`` cleared whatever --output held, a dataset's manifest and shards too."""
    dataset = tmp_path / "my_dataset"
    shutil.copytree(data, dataset)
    before = sorted(p.name for p in dataset.iterdir())
    with pytest.raises(UsageError, match="my_dataset holds no run .*--overwrite clears only a run folder") as e:
        run(data, dataset, overwrite=True, max_steps=1)
    assert e.value.param == "output"
    assert sorted(p.name for p in dataset.iterdir()) == before
    export = tmp_path / "hf"  # a config.json that is not a run's
    export.mkdir()
    (export / "config.json").write_text('{"architectures": ["BertForPreTraining"]}')
    with pytest.raises(UsageError, match="holds no run"):
        run(data, export, overwrite=True, max_steps=1)
    assert (export / "config.json").exists()
    stopped = tmp_path / "stopped"  # a run stopped before its first checkpoint left its config.json only
    run(data, stopped, max_steps=1, checkpoint_every=1)
    shutil.rmtree(stopped / "checkpoints")
    (stopped / "metrics.jsonl").unlink()
    assert [r["step"] for r in run(data, stopped, overwrite=True, max_steps=1)] == [1]
