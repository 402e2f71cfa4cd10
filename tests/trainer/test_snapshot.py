"""Checkpoints written in the background (issue 52, item 4): the state of their step whatever training does
meanwhile, the same files as a write in the loop, pruning only once the new one is complete, a write error one
line that keeps the last checkpoint, the end of a run waiting for the write, and a kill -9 mid-write."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import checkpoint_writer
from bertstream.trainer.checkpoint_writer import CheckpointWriter
from bertstream.trainer.distributed import DistInfo
from bertstream.trainer.model_config import PRESETS
from bertstream.trainer.snapshot import Background, HostCopy
from bertstream.trainer.training import Training

REPO = Path(__file__).resolve().parents[2]
ONE = DistInfo(0, 0, 1, torch.device("cpu"))


def training(seed: int = 0) -> Training:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)  # as the table builds it (found_inf)
    t = Training(model, model, optimizer, LambdaLR(optimizer, lambda s: 1.0), max_grad_norm=1.0)
    step(t)
    return t


def step(t: Training) -> None:
    t.model(torch.ones(3, 8)).square().sum().backward()
    t.optimizer_step()


def writer(writes: Background | None) -> CheckpointWriter:
    return CheckpointWriter({"model": PRESETS["tiny"](8).to_dict()}, "[PAD]\n", ONE, writes=writes)


class Gate:
    """Holds every checkpoint write at its start until :meth:`open` (the test decides when the thread writes):
    where the writing thread waits for the copies to be ready, before it reads anything of the write's own (the
    step's number too: read when the thread ran, it named step 1's copy step 4)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.event = threading.Event()
        monkeypatch.setattr(checkpoint_writer, "copied_event", lambda device: self.event.wait)

    def open(self) -> None:
        self.event.set()


def test_a_background_checkpoint_holds_its_steps_state_while_training_goes_on(tmp_path, monkeypatch):
    t = training()
    expected = {k: v.clone() for k, v in t.raw.state_dict().items()}
    moments = {k: v.clone() for k, v in t.optimizer.state[t.raw[0].weight].items()}
    gate = Gate(monkeypatch)
    w = writer(Background())
    assert w.save(tmp_path / "async", t, {"data": [1, 2]}) is None  # written in the background
    for _ in range(3):  # training changes the weights and the moments before the write begins
        step(t)
    assert not torch.equal(t.raw.state_dict()["0.weight"], expected["0.weight"])
    gate.open()
    w.finish()
    loaded = ckpt.load(ckpt.step_dir(tmp_path / "async", 1))
    assert loaded.step == 1 and loaded.state["data"] == [1, 2] and loaded.state["scheduler"]["last_epoch"] == 1
    assert all(torch.equal(loaded.model[k], v) for k, v in expected.items())
    saved = loaded.optimizer["state"][0]
    assert all(torch.equal(saved[k], v) for k, v in moments.items())


def test_background_and_loop_writes_give_the_same_files(tmp_path):
    t = training()
    assert writer(None).save(tmp_path / "sync", t, {}) == ckpt.step_dir(tmp_path / "sync", 1)
    w = writer(Background())
    w.save(tmp_path / "async", t, {})
    w.finish()
    a, b = ckpt.step_dir(tmp_path / "sync", 1), ckpt.step_dir(tmp_path / "async", 1)
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for name in ("state.json", "config.json", "vocab.txt"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    x, y = ckpt.read_tensors(a / ckpt.MODEL_FILE), ckpt.read_tensors(b / ckpt.MODEL_FILE)  # (its header's order varies)
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    for name in ("optimizer.pt", "rng.pt"):
        x, y = ckpt.read_torch(a / name), ckpt.read_torch(b / name)
        assert str(x) == str(y), name


def test_the_last_complete_checkpoint_is_pruned_only_once_the_next_is_complete(tmp_path, monkeypatch):
    t = training()
    w = writer(Background())
    w.save(tmp_path, t, {"data": {}}, keep=1)
    w.finish()
    gate = Gate(monkeypatch)
    step(t)
    w.save(tmp_path, t, {"data": {}}, keep=1)
    w.poll(meet=True)  # the write has not begun: nothing to say, nothing pruned
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-0000001"]
    assert ckpt.latest(tmp_path) is not None
    gate.open()
    w.finish()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-0000002"]


def test_a_full_disk_in_the_background_is_one_error_at_the_next_step_and_the_last_checkpoint_stays(
    tmp_path, monkeypatch
):
    t = training()
    w = writer(Background())
    w.save(tmp_path, t, {})
    w.finish()

    def full(path, tensors, metadata):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(ckpt, "write_tensors", full)
    step(t)
    w.save(tmp_path, t, {})
    assert w.writes is not None
    while not w.writes.done():  # the first step after the write ended, however long it took
        time.sleep(0.01)
    with pytest.raises(ckpt.CheckpointError) as e:
        w.poll(meet=False)
    target = ckpt.step_dir(tmp_path, 2)
    assert str(e.value).startswith(f"checkpoint {target} could not be written: No space left on device")
    assert "the last checkpoint is kept" in str(e.value)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-0000001"]
    assert not list((tmp_path / ckpt.CHECKPOINTS).glob("*.tmp-*"))
    w.poll(meet=False)  # said once
    w.finish()


def test_nan_weights_found_in_the_copy_fail_the_write_not_the_step(tmp_path):
    t = training()
    with torch.no_grad():
        t.raw[0].weight[0, 0] = float("nan")
    w = writer(Background())
    w.save(tmp_path, t, {})
    with pytest.raises(ckpt.CheckpointError, match="weights hold NaN or inf"):
        w.finish()
    assert not ckpt.list_checkpoints(tmp_path)


def test_leaving_the_run_on_an_interrupt_waits_for_the_write_in_flight(tmp_path):
    done = tmp_path / "written"
    reported: list[str] = []

    def write() -> Path:
        threading.Event().wait(0.2)
        done.write_text("whole")
        return done

    with pytest.raises(KeyboardInterrupt), Background(report=reported.append) as writes:
        writes.start(write)
        raise KeyboardInterrupt
    assert done.read_text() == "whole" and not reported

    def fails() -> None:
        raise ckpt.CheckpointError("checkpoint X could not be written: disk full")

    with pytest.raises(KeyboardInterrupt), Background(report=reported.append) as writes:
        writes.start(fails)
        raise KeyboardInterrupt
    assert reported == ["checkpoint X could not be written: disk full"]  # said, the interrupt stays the run's


def test_an_interrupt_while_a_write_is_handed_over_still_waits_for_it(tmp_path, monkeypatch):
    # A Ctrl-C inside Thread.start (its wait for the new thread to run) left the write running but unrecorded:
    # leaving the run waited for nothing and the process exited half-way through it (a .tmp-PID checkpoint left
    # behind, seen in test_sigterm_behaves_as_ctrl_c[Ctrl-C] once in a clean-clone run). A write that began is
    # complete when the run leaves, wherever the interrupt lands while it is handed over.
    done, began = tmp_path / "written", threading.Event()

    def write() -> Path:
        began.set()
        threading.Event().wait(0.3)  # still writing when the interrupt is handled
        done.write_text("whole")
        return done

    real_start = threading.Thread.start

    def start_then_interrupted(thread: threading.Thread) -> None:
        real_start(thread)
        raise KeyboardInterrupt

    # in Thread.start, once the new thread runs
    monkeypatch.setattr(threading.Thread, "start", start_then_interrupted)
    with pytest.raises(KeyboardInterrupt), Background() as writes:
        writes.start(write)
    monkeypatch.undo()
    assert not began.is_set() or done.read_text() == "whole"

    # right after the write is handed over, before the writer records it
    class InterruptedOnce:
        def __init__(self, jobs: Any) -> None:
            self.jobs, self.interrupted = jobs, False

        def put(self, item: Any) -> None:
            self.jobs.put(item)
            if not self.interrupted:
                self.interrupted = True
                raise KeyboardInterrupt

        def get(self) -> Any:
            return self.jobs.get()

    done.unlink(missing_ok=True)
    writes = Background()
    writes._jobs = InterruptedOnce(writes._jobs)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt), writes:
        writes.start(write)
    assert done.read_text() == "whole" and writes._worker is None  # waited for, and its worker ended


def test_host_copies_are_reused_and_are_copies():
    host = HostCopy()
    a = {"w": torch.ones(3), "groups": [{"lr": 1.0, "params": [0]}]}
    first = host.copy(a)
    a["w"] += 1
    a["groups"][0]["lr"] = 2.0
    assert first["w"].tolist() == [1.0, 1.0, 1.0] and first["groups"][0]["lr"] == 1.0
    second = host.copy(a)
    assert second["w"].data_ptr() == first["w"].data_ptr() and second["w"].tolist() == [2.0, 2.0, 2.0]
    assert host.nbytes == 12


KILLED_MID_WRITE = """
import sys, torch
from pathlib import Path
from bertstream.trainer import checkpoint as ckpt
from tests.trainer.test_snapshot import Background, step, training, writer

root = Path(sys.argv[1])
t = training()
w = writer(Background())
w.save(root, t, {"data": {}})
w.finish()
real = ckpt.write_tensors

def stalls(path, tensors, metadata):
    real(path, tensors, metadata)
    print("mid-write", flush=True)  # model.safetensors is in the .tmp folder; the rest never comes
    sys.stdin.read()

ckpt.write_tensors = stalls
step(t)
w.save(root, t, {"data": {}})
for _ in range(1000):  # training goes on while the thread writes
    step(t)
w.finish()
"""


@pytest.mark.slow
def test_kill_9_during_a_background_write_leaves_the_last_checkpoint_newest(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_WRITE, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert p.stdout is not None and p.stdout.readline() == "mid-write\n"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.stdin is not None
    p.stdin.close()
    partial = list((tmp_path / ckpt.CHECKPOINTS).glob("step-0000002.tmp-*"))
    assert len(partial) == 1 and (partial[0] / ckpt.MODEL_FILE).is_file()
    restored = ckpt.latest(tmp_path)
    assert restored is not None and restored.step == 1
    assert ckpt.remove_partial(tmp_path) == partial and [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "step-0000001"
    ]
