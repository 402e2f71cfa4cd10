"""The trainer's intra-op threads: the cores a rank may use less its loader workers (at least 1) unless
``--threads`` or ``OMP_NUM_THREADS`` says, set before step 1 and said in the run line (issue 54: torch's default
of one thread per core ran a tiny model at half speed or less beside 2 loader workers on 2 cores)."""

from __future__ import annotations

import pytest
import torch

from bertstream.cli.errors import UsageError
from bertstream.trainer import threads
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


@pytest.mark.parametrize(
    "cores,ranks,workers,expected",
    [(2, 1, 2, 1), (2, 1, 0, 2), (8, 1, 2, 6), (16, 2, 2, 6), (16, 4, 0, 4), (4, 8, 2, 1), (1, 1, 0, 1)],
)
def test_the_default_is_the_ranks_cores_less_its_loader_workers(machine, cores, ranks, workers, expected):
    machine(cores, ranks)
    n, why = threads.choose(0, workers)
    assert n == expected and f"less {workers} loader worker" in why
    assert ("ranks" in why) == (ranks > 1)


def test_the_flag_then_the_environment_win_over_the_default(machine, monkeypatch):
    machine(2)
    assert threads.choose(3, 2) == (3, "--threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads.choose(0, 2) == (2, "OMP_NUM_THREADS")
    assert threads.choose(1, 2) == (1, "--threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")  # not a count: the default
    assert threads.choose(0, 2)[0] == 1


def test_threads_beyond_the_machine_are_refused_in_one_line():
    with pytest.raises(UsageError, match="threads: must be an integer >= 0"):
        RunConfig(output="x", threads=-1)
    with pytest.raises(UsageError, match="threads: 100000 is more than this machine runs"):
        RunConfig(output="x", threads=100000)


def test_a_run_sets_its_threads_and_says_so(demo_shards, tmp_path, machine, capfd):
    machine(2)
    train(demo_shards, tmp_path / "run", max_steps=1, num_workers=2)
    assert torch.get_num_threads() == 1
    assert "threads 1 (2 cores less 2 loader workers, at least 1)" in capfd.readouterr().err
    train(demo_shards, tmp_path / "run2", max_steps=1, threads=2)
    assert torch.get_num_threads() == 2
    assert "threads 2 (--threads)" in capfd.readouterr().err
