"""Training on a cluster as clusters behave (issue 48): two localhost "nodes" (one process each, c10d's env
rendezvous over gloo, as torchrun or srun set it up) whose run folders, flags or liveness differ, and the
signals a scheduler sends. Each case ends in one line and a non-zero exit. NCCL and GPUs are not run here.

The ranks are started directly with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (what torchrun sets on each
node): cheaper than a torchrun launch, and each rank can be given its own flags and folder, as nodes can."""

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
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.metrics import read_metrics
from tests.beam_services import free_port
from tests.processes import HANG_GUARD_S, ended, wait_until

ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cluster")
    vocab = bert_like_vocab(1200)
    inst = make_instances(64, vocab=vocab, seed=3, max_len=32, max_masked=5)
    write_dataset(root / "data", inst, [64], vocab=vocab, formats=("arrow",), parameters={"max_seq_length": 32})
    (root / "model.json").write_text(
        json.dumps({"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64})
    )
    return root


def flags(shards: Path, out: Path, **over: str) -> list[str]:
    values = {
        "--data": str(shards / "data"),
        "--output": str(out),
        "--model-config": str(shards / "model.json"),
        "--max-steps": "6",
        "--batch-size": "4",
        "--log-every": "1",
        "--checkpoint-every": "3",
        "--warmup-steps": "2",
        "--num-workers": "0",
        **over,
    }
    return ["pretrain", "--no-tensorboard", *[x for kv in values.items() for x in kv]]


def launch(ranks: list[list[str]], **popen) -> list[subprocess.Popen]:
    """One process per rank, rank r with the arguments ``ranks[r]``, rendezvous on a free localhost port."""
    port = str(free_port())
    procs = []
    for rank, args in enumerate(ranks):
        env = {**os.environ, **ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": str(len(ranks))}
        env.update(RANK=str(rank), LOCAL_RANK="0")  # each rank alone on its "node"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bertstream.trainer", *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                **popen,
            )
        )
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 300) -> list[tuple[int, str]]:
    return [(p.wait(timeout=timeout), p.stdout.read() + p.stderr.read()) for p in procs]  # type: ignore[union-attr]


def errors(outputs: list[tuple[int, str]]) -> list[str]:
    return [line for _, out in outputs for line in out.splitlines() if line.startswith("Error:")]


@pytest.mark.slow  # two launches of two ranks: about 20 s on 2 busy cores
def test_ranks_that_do_not_share_the_run_folder_or_the_flags_are_refused_in_one_line(shards, tmp_path):
    # Item 1: rank 0's folder holds a checkpoint at step 3 (of one process with the global batch of two ranks),
    # rank 1's node-local folder of the same run nothing: rank 0 would resume at step 3, rank 1 start afresh.
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    one = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertstream.trainer",
            *flags(shards, node0, **{"--max-steps": "3", "--batch-size": "8"}),
        ],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr
    out = finish(launch([flags(shards, node0), flags(shards, node1)]))
    assert [code for code, _ in out] == [1, 1], out
    (line,) = errors(out)  # once, from rank 0, naming rank 1
    assert line.startswith("Error: rank 1 has ") and "every node must see the same run folder" in line, line
    assert "Traceback" not in out[0][1] + out[1][1]
    assert [r["step"] for r in read_metrics(node0)] == [1, 2, 3]  # nothing trained on top
    assert not ckpt.list_checkpoints(node1)

    # Item 2: one shared folder, but rank 1 runs another --batch-size (a quarter of the data seen twice).
    shared = tmp_path / "shared"
    out = finish(launch([flags(shards, shared), flags(shards, shared, **{"--batch-size": "2"})]))
    assert [code for code, _ in out] == [1, 1], out
    (line,) = errors(out)
    assert line.startswith("Error: rank 1 has --batch-size 2, rank 0 4: every rank must run the same flags"), line
    assert not read_metrics(shared) if shared.exists() else True


@pytest.mark.slow  # two launches of two ranks, one of them waits out a 10 s timeout
def test_a_silent_peer_is_timed_out_and_sigterm_ends_a_rank_waiting_for_it(shards, tmp_path):
    # Item 3: rank 1 stops answering (SIGSTOP, as a hung node) once the run is under way.
    for timeout, signalled in (("10", False), ("600", True)):
        out_dir = tmp_path / f"run-{timeout}"
        procs = launch([flags(shards, out_dir, **{"--max-steps": "100000", "--dist-timeout": timeout})] * 2)
        deadline = time.monotonic() + 300
        while not (out_dir / "metrics.jsonl").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(procs[1].pid, signal.SIGSTOP)
        if signalled:  # a rank blocked in a collective ends on SIGTERM, not after --dist-timeout
            time.sleep(1)
            os.kill(procs[0].pid, signal.SIGTERM)
        code0 = procs[0].wait(timeout=120)
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait()
        text = procs[0].stdout.read() + procs[0].stderr.read()  # type: ignore[union-attr]
        # Item 6: progress is rank 0's, not every node's first process (both ranks here have LOCAL_RANK 0)
        assert "[berttrain] step 1/100000 (" in text, text
        assert "[berttrain] step" not in procs[1].stderr.read() + procs[1].stdout.read()  # type: ignore[union-attr]
        lines = [line for line in text.splitlines() if line.startswith("Error:")]
        assert "Traceback" not in text, text
        if signalled:
            assert code0 == 143, text
            assert len(lines) == 1 and lines[0].startswith("Error: interrupted (SIGTERM)"), text
        else:
            assert code0 == 1, text
            assert len(lines) == 1 and lines[0].startswith("Error: rank 1 did not answer within --dist-timeout 10 s"), (
                text
            )
            # said once while waiting (after a quarter of the timeout without a step, rank 1 silent for 3 beats)
            assert text.count("[berttrain] rank 0 is waiting for rank 1 (silent for") == 1, text


@pytest.mark.slow  # one launch of two ranks
def test_a_full_disk_in_a_background_write_ends_every_rank_in_one_line(shards, tmp_path):
    """Issue 52: rank 0 writes the checkpoint in a thread while both ranks train on; its write fails (a
    file-size limit, as a full disk): at the next log step every rank learns it and ends (exit 1), rank 0 says
    it once, naming the checkpoint; before, rank 1 went on into its next collective and waited for a dead peer."""
    import resource

    def limit() -> None:  # config.json, the lock and metrics fit; model.safetensors (~170 kB) does not
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    out_dir = tmp_path / "run"
    out = finish(launch([flags(shards, out_dir, **{"--dist-timeout": "120"})] * 2, preexec_fn=limit))
    assert [code for code, _ in out] == [1, 1], out
    (line,) = errors(out)
    assert line.startswith(f"Error: checkpoint {ckpt.step_dir(out_dir, 3)} could not be written"), line
    assert "the last checkpoint is kept" in line and "Traceback" not in out[0][1] + out[1][1]
    assert not ckpt.list_checkpoints(out_dir) and not list((out_dir / ckpt.CHECKPOINTS).glob("*.tmp-*"))


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.slow
def _sigterm_taken(pid: int) -> bool:
    """Whether ``pid`` has no SIGTERM pending (taken by its handler or its waiting thread), or has ended."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return ended(pid) or not pending & (1 << (signal.SIGTERM - 1))


def test_sigterm_to_the_whole_process_group_is_reported_as_sigterm(shards, tmp_path):
    """Item 4: torchrun, scancel and ``kill -TERM -PGID`` signal the loader workers too, in no set order; here
    the workers first (the order that made the run report a dead worker, exit 1), then the trainer once they
    have ended. Every wait is on an event (metrics logged, the workers gone), none a fixed sleep: at load 10 a
    half-second sleep was no longer 'after the workers ended' (issue 54)."""
    out_dir = tmp_path / "run"
    # stderr into a file, not a pipe read only at the end: a run that logs every step filled the pipe's 64 KB
    # and blocked in a write, so it never reaped its workers and the wait for their exit never ended
    log = (tmp_path / "stderr.txt").open("w")
    p = subprocess.Popen(
        [sys.executable, "-m", "bertstream.trainer", *flags(shards, out_dir, **{"--max-steps": "100000",
                                                                               "--num-workers": "2"})],
        env={**os.environ, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        metrics = out_dir / "metrics.jsonl"
        wait_until(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 2, p, what="two steps")
        workers = children(p.pid)
        assert len(workers) >= 2, workers
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
        # a worker ignores a SIGTERM that is not its parent's (trainer/data/workers.py): wait until each has taken
        # it (no longer pending), or has ended
        wait_until(lambda: all(_sigterm_taken(pid) for pid in workers), what="the workers' taking their SIGTERM")
        if p.poll() is None:  # it may have ended on its workers' deaths already: reported as SIGTERM too
            os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=HANG_GUARD_S)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()
    err = (tmp_path / "stderr.txt").read_text()
    assert p.returncode == 143, err
    assert (
        [line for line in err.splitlines() if line.startswith("Error:")]
        == [line for line in err.splitlines() if line.startswith("Error: interrupted (SIGTERM)")]
        != []
    ), err


def test_a_launch_without_its_rendezvous_variables_is_one_line(monkeypatch):
    """Item 6: WORLD_SIZE without MASTER_ADDR or RANK (a hand-made launch line) was torch's ValueError traceback."""
    from bertstream.trainer import distributed as D
    from bertstream.trainer.errors import RunError

    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(RunError, match="^WORLD_SIZE is 2 but MASTER_ADDR, RANK, LOCAL_RANK is not set: launch"):
        D.setup("cpu")


def test_an_elastic_resume_with_grad_accum_states_both_batches(tmp_path):
    """Item 6: 2 ranks x 4 resumed as 1 x 4 with --grad-accum 2 was told "1 x 4 = 4" against "2 x 4 = 8": the
    step's sequences are the same, the micro-step batch (which the data order follows) is not; say both."""
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.errors import RunError
    from bertstream.trainer.pretrain.resume import check_resume

    saved = {"train": TrainConfig.build(paths=("d",), output="o", batch_size=4).to_dict(), "world_size": 2}
    cfg = TrainConfig.build(paths=("d",), output="o", batch_size=4, grad_accum=2)
    with pytest.raises(RunError, match=r"micro-step batch .*: the run has 2 x 4 = 8 \(x --grad-accum 1 = 8 a step\), "
                       r"this resume 1 x 4 = 4 \(x --grad-accum 2 = 8 a step\)$"):  # fmt: skip
        check_resume(cfg, saved, tmp_path, 3, world_size=1)


@pytest.mark.slow  # three launches of two ranks that end at start-up: about 12 s on 2 busy cores
def test_a_start_up_error_prints_once_naming_the_rank_at_fault(shards, tmp_path):
    """Item 6: an error that ranks find at start (a bad --data, --init-from or --output) printed one Error line
    per rank, and a rank that passed waited for the failed one. Once, from rank 0: plain when every rank failed
    alike, naming the rank when not; every rank exits non-zero."""
    missing = tmp_path / "nowhere"
    # Only rank 1's node lacks the data, found once the ranks have met (rank 0 would wait for it).
    out = finish(launch([flags(shards, tmp_path / "a"), flags(shards, tmp_path / "a", **{"--data": str(missing)})]))
    assert [code for code, _ in out] == [1, 1], out
    (line,) = errors(out)
    assert line.startswith(f"Error: rank 1: {missing}/manifest.json: no manifest"), line
    assert "Traceback" not in out[0][1] + out[1][1], out
    assert not (tmp_path / "a").exists()  # rank 0 made it for its lock; nothing is kept

    # Only rank 1's node lacks --init-from, which click finds before the ranks meet (a usage error, exit 2):
    # rank 1 meets them to say so (rank 0 waited in the rendezvous until --dist-timeout, then a traceback).
    init = {"--init-from": str(missing), "--dist-timeout": "60"}
    out = finish(
        launch([flags(shards, tmp_path / "b", **{"--dist-timeout": "60"}), flags(shards, tmp_path / "b", **init)])
    )
    assert [code for code, _ in out] == [2, 2], out
    (line,) = errors(out)
    assert line.startswith("Error: rank 1: Invalid value for '--init-from'") and str(missing) in line, line
    assert [text.count("Usage: ") for _, text in out] == [1, 0], out
    assert "Traceback" not in out[0][1] + out[1][1], out

    # The same bad flag on every rank (one command line): printed once, as one process prints it.
    out = finish(launch([flags(shards, tmp_path / "c", **{"--batch-size": "x"})] * 2))
    assert [code for code, _ in out] == [2, 2], out
    (line,) = errors(out)
    assert line == "Error: Invalid value for '--batch-size': 'x' is not a valid integer.", line
    assert [text.count("Usage: ") for _, text in out] == [1, 0], out


def test_the_ranks_outcomes_settle_into_one_error():
    """Item 6: what :func:`all_or_none` raises on every rank (rank 0 prints it) from the ranks' exchanged outcomes."""
    from bertstream.trainer.distributed import AgreedUsageError, Disagreement, Outcome, settle

    bad, other = Outcome("--data /x: no manifest"), Outcome("--init-from y: no such folder")
    assert settle([None, None]) is None
    assert str(settle([bad, bad])) == "--data /x: no manifest"  # every rank alike: as a single process says it
    assert str(settle([None, bad])) == "rank 1: --data /x: no manifest"
    assert str(settle([None, bad, None, bad])) == "ranks 1, 3: --data /x: no manifest"
    assert str(settle([other, bad, bad])) == "rank 0: --init-from y: no such folder"  # the lowest rank's first
    assert str(settle([bad, None], rank0_only=True)) == "--data /x: no manifest"  # what only rank 0 checks
    assert str(settle([None, bad], rank0_only=True)) == "rank 1: --data /x: no manifest"
    assert isinstance(settle([bad, None]), Disagreement)
    usage = settle([None, Outcome("is a file", usage=True, param="output")])
    assert isinstance(usage, AgreedUsageError) and (usage.param, usage.message) == ("output", "rank 1: is a file")


def test_ranks_agree_on_every_flag_but_where_each_computes_and_reads():
    """A node's own --device, --threads and --num-workers (tagged PER_NODE at their declaration) are left out of
    what the ranks compare; any other flag is in it."""
    from bertstream.cli import options
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.pretrain.restore import shared_flags

    base = TrainConfig.build(paths=("d",), output="o")
    node = TrainConfig.build(paths=("d",), output="o", device="cpu", threads=3, num_workers=4)
    assert shared_flags(node) == shared_flags(base)
    flag = {leaf.name: leaf.flag or leaf.name for leaf in options.leaves(TrainConfig)}
    per_node = {flag[name] for name in options.tagged(TrainConfig, options.PER_NODE)}
    assert per_node == {"--device", "--threads", "--num-workers"} and not per_node & set(shared_flags(base))
    assert set(shared_flags(base)) | per_node == set(flag.values())  # the rest, every one of them
    assert shared_flags(TrainConfig.build(paths=("d",), output="o", batch_size=3)) != shared_flags(base)
