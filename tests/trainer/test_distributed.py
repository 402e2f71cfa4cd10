"""A rank that waits or cannot end says where it is: SIGUSR1 prints every thread's stack and the rank goes on
(``trainer.rank_signals``); a rank still alive ``EXIT_GRACE_S`` after the process group is gone prints them and
exits (``trainer.distributed.teardown``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.beam_services import free_port
from tests.processes import run_launch


def test_sigusr1_prints_every_threads_stack_and_the_rank_goes_on():
    prog = (
        "import os, signal\n"
        "from bertstream.trainer.rank_signals import show_stacks_on_sigusr1\n"
        "def waiting_on_a_peer():\n"
        "    os.kill(os.getpid(), signal.SIGUSR1)\n"
        "show_stacks_on_sigusr1()\n"
        "waiting_on_a_peer()\n"
        "print('went on')\n"
    )
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "went on"
    assert "waiting_on_a_peer" in r.stderr and "Current thread" in r.stderr, r.stderr


def test_a_rank_stuck_after_teardown_prints_its_stacks_and_exits(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(
        "import time\n"
        "import torch.distributed as dist\n"
        "from bertstream.trainer import distributed as D\n"
        "D.EXIT_GRACE_S = 1.0\n"
        "dist.init_process_group('gloo')\n"
        "D.teardown()\n"
        "print('torn down', flush=True)\n"
        "def a_destructor_that_never_returns():\n"
        "    time.sleep(3600)\n"
        "a_destructor_that_never_returns()\n"
    )
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port())]
    r = run_launch([*argv, str(script)], env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode != 0
    assert r.stdout.count("torn down") == 2, r.stdout
    assert r.stderr.count("a_destructor_that_never_returns") >= 2, r.stderr  # each rank's stack
