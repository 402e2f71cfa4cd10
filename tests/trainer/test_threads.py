"""The trainer's intra-op threads: the cores a rank may use unless ``--threads`` or ``OMP_NUM_THREADS`` says, set
before step 1 and said in the run line with OpenMP's waits, which ``berttrain`` bounds before torch loads (issue
54: torch's long spin made a thread per core collapse beside other work; ``benchmarks/train_threads.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from bertstream.cli.errors import UsageError
from bertstream.trainer import omp_waits, threads
from bertstream.trainer.config import RunConfig
from tests.trainer.pretrain.test_loop import train


@pytest.fixture
def machine(monkeypatch):
    """A node of ``cores`` cores running ``ranks`` ranks, no OMP_NUM_THREADS, torch's threads restored after."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    before = torch.get_num_threads()

    def set_machine(cores: int, ranks: int = 1) -> None:
        monkeypatch.setattr(threads, "cores", lambda: cores)
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))

    yield set_machine
    torch.set_num_threads(before)


@pytest.mark.parametrize("cores,ranks,expected", [(2, 1, 2), (8, 1, 8), (16, 2, 8), (16, 4, 4), (4, 8, 1), (1, 1, 1)])
def test_the_default_is_the_ranks_share_of_the_cores(machine, cores, ranks, expected):
    machine(cores, ranks)
    n, why = threads.choose(0)
    assert n == expected and why.startswith(f"{expected} ")
    assert ("ranks" in why) == (ranks > 1)


def test_the_flag_then_the_environment_win_over_the_default(machine, monkeypatch):
    machine(2)
    assert threads.choose(3) == (3, "--threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.choose(0) == (1, "OMP_NUM_THREADS")
    assert threads.choose(2) == (2, "--threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")  # not a count: the default
    assert threads.choose(0) == (2, "2 cores")


def test_threads_beyond_the_machine_are_refused_in_one_line():
    with pytest.raises(UsageError, match="threads: must be an integer >= 0"):
        RunConfig(threads=-1)
    with pytest.raises(UsageError, match="threads: 100000 is more than this machine runs"):
        RunConfig(threads=100000)


def test_a_run_sets_its_threads_and_says_so(demo_shards, tmp_path, machine, capfd):
    machine(2)
    train(demo_shards, tmp_path / "run", max_steps=1, num_workers=2)
    assert torch.get_num_threads() == 2
    assert "threads 2 (2 cores), " in capfd.readouterr().err
    train(demo_shards, tmp_path / "run2", max_steps=1, threads=1)
    assert torch.get_num_threads() == 1
    assert "threads 1 (--threads), " in capfd.readouterr().err


def _entry(**env: str) -> list[str]:
    """What the ``berttrain`` entry point leaves when its command line starts, in a fresh interpreter whose
    environment has no OpenMP settings but ``env``: ``GOMP_SPINCOUNT``, whether torch was loaded, and the run
    line's words for the waits (the command line is a stand-in that prints them: torch's import is not needed)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    prog = (
        "import os, sys, types\n"
        "from bertstream.trainer import omp_waits\n"
        "cli = types.ModuleType('bertstream.trainer.cli')\n"
        "cli.main = lambda: print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules, "
        "omp_waits.described().replace(' ', '_'))\n"
        "sys.modules['bertstream.trainer.cli'] = cli\n"
        "from bertstream.trainer.__main__ import run\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", prog], env={**clean, **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_berttrain_bounds_openmps_spin_before_torch_loads_and_keeps_the_users_own():
    """The entry point sets ``GOMP_SPINCOUNT`` before its command line (which imports torch) is imported, and
    leaves a user's ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` as they are; the run line says which holds."""
    assert _entry() == [str(omp_waits.SPIN), "False", f"OpenMP_spin_{omp_waits.SPIN}"]
    assert _entry(GOMP_SPINCOUNT="100") == ["100", "False", "GOMP_SPINCOUNT=100"]
    assert _entry(OMP_WAIT_POLICY="PASSIVE") == ["None", "False", "OMP_WAIT_POLICY=PASSIVE"]


def test_bounding_after_torch_loaded_changes_nothing(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    omp_waits.bound()  # torch is loaded in this process: its OpenMP read the waits already
    assert "GOMP_SPINCOUNT" not in os.environ and omp_waits.described() == "torch's OpenMP spin"
