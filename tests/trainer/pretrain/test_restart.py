"""torchrun --max-restarts restarts a run and it resumes from its checkpoint (issue 53): under torchrun's static
rendezvous (--master-port) every restart failed, the restarted ranks reading the killed incarnation's addresses
from the agent's store (gloo connectFullMesh 'Connection refused'), and the launch failed or waited silently.
Two localhost ranks over gloo; rank 0 is SIGKILLed once, after its checkpoint of step 10."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertstream.trainer.metrics import read_metrics
from tests.beam_services import free_port
from tests.trainer.test_run_safety import small_dataset


def rank_zero_of(run: Path) -> int | None:
    """The pid of the first incarnation's rank 0 of the run writing ``run``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if str(run).encode() in cmdline and b"RANK=0" in environ and b"TORCHELASTIC_RESTART_COUNT=0" in environ:
            return int(entry.name)
    return None


@pytest.mark.slow  # two ranks started twice by torchrun: 1-3 minutes on two busy cores
@pytest.mark.parametrize("rendezvous", ["static"])  # c10d ("--rdzv-backend c10d") restarted before the fix too
def test_a_rank_killed_once_is_restarted_and_the_run_resumes_and_finishes(tmp_path, rendezvous):
    data = small_dataset(tmp_path / "ds", n=400)
    run = tmp_path / "run"
    port = free_port()
    where = ["--master-port", str(port)] if rendezvous == "static" else ["--rdzv-backend", "c10d"]
    if rendezvous == "c10d":
        where += ["--rdzv-endpoint", f"127.0.0.1:{port}"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1"]
    argv = [*torchrun, "--rdzv-id", f"restart-{rendezvous}", *where, "-m", "bertstream.trainer", "pretrain"]
    argv += ["--data", str(data), "--output", str(run), "--batch-size", "2", "--max-steps", "60"]
    argv += ["--checkpoint-every", "10", "--log-every", "1", "--num-workers", "0", "--no-tensorboard"]
    argv += ["--dropout", "0", "--dist-timeout", "60"]
    log = tmp_path / "launch.log"
    with open(log, "w") as out:
        launch = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
        try:
            victim = None
            while launch.poll() is None and victim is None:  # until the checkpoint of step 10 is complete
                if (run / "checkpoints" / "step-0000010").is_dir():
                    victim = rank_zero_of(run)
                time.sleep(0.05)
            assert victim is not None, log.read_text()
            os.kill(victim, signal.SIGKILL)
            assert launch.wait(timeout=600) == 0, log.read_text()
        finally:
            if launch.poll() is None:
                launch.kill()
    text = log.read_text()
    assert "resumed from" in text and "connectFullMesh" not in text, text
    steps = [r["step"] for r in read_metrics(run) if r.get("split", "train") == "train"]
    assert steps == list(range(1, 61))  # one history: truncated to the checkpoint, then continued
