"""Process-group set-up under ``torchrun`` (NCCL on GPU, gloo on CPU) and small collective helpers.

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) everything runs as a single process and every
helper is a no-op, so the same training code serves a laptop and a multi-node cluster.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bertstream.cli.errors import UsageError
from bertstream.trainer import progress
from bertstream.trainer.config import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, MIN_TIMEOUT_S, DeviceConfig, RunConfig, waited
from bertstream.trainer.errors import RunError, UserError
from bertstream.trainer.peers import PEERS
from bertstream.trainer.rank_signals import show_stacks_on_sigusr1, watch_sigterm

_LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK")


@dataclass(frozen=True, slots=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    timeout_s: float = DEFAULT_TIMEOUT_S  # how long a collective waits for the peers (--dist-timeout)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


class Disagreement(RunError):
    """Raised alike on every rank from what all ranks exchanged: rank 0 reports it, the others end quietly."""

    agreed = True


class AgreedUsageError(UsageError, UserError):
    """A usage error (exit 2) raised alike on every rank from what all ranks exchanged, as :class:`Disagreement`;
    ``param`` "": click's own, whose message is whole."""

    agreed = True


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a rank's start-up checks failed, as the ranks exchange it: the one line it would print (a usage
    error's: ``usage``, and ``param`` its field, "" for click's own), or a bug's type and first line (``bug``:
    its traceback stays on its rank)."""

    line: str
    usage: bool = False
    param: str = ""
    bug: bool = False

    @classmethod
    def of(cls, e: Exception) -> Outcome:
        from bertstream.trainer.errors import error_line

        if isinstance(e, UsageError):
            return cls(e.message, usage=True, param=e.param)
        line = error_line(e)
        if line is None:
            first = next((s for s in str(e).splitlines() if s.strip()), "")
            return cls(f"{type(e).__name__}: {first} (a bug: its traceback is in that rank's output)", bug=True)
        return cls(line)


def settle(outcomes: list[Outcome | None], *, rank0_only: bool = False) -> Exception | None:
    """The one error every rank raises for the ranks' ``outcomes`` (None: that rank passed): the lowest failing
    rank's, as it is when every rank failed alike, else naming the ranks that failed so (``rank 1: ...``), as
    rank 0 reports them; ``rank0_only``: checks that only rank 0 makes, whose failure is the run's. None: every
    rank passed."""
    failed = [(rank, o) for rank, o in enumerate(outcomes) if o is not None]
    if not failed:
        return None
    first = failed[0][1]
    ranks = [rank for rank, o in failed if o == first]
    line = first.line
    if len(ranks) < len(outcomes) and not (rank0_only and ranks == [0]):
        line = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {line}"
    return AgreedUsageError(first.param, line) if first.usage else Disagreement(line)


@contextmanager
def all_or_none(info: DistInfo, *, rank0_only: bool = False) -> Iterator[None]:
    """Start-up checks that pass on every rank or fail on every rank, and are reported once. Each rank runs the
    block, then the ranks exchange their outcomes (the exchange is a barrier); if one failed, every rank raises
    :func:`settle`'s error, which rank 0 alone prints (each rank printed its own ``Error:`` line before, and a
    rank that passed waited for the failed one in its next collective until the peer was lost). The block
    must hold no collective: a rank that fails before it would wait here while the others wait there. A bug
    raises its own traceback on its rank; Ctrl-C and SIGTERM end the rank as always (the others lose a peer).
    A command's first collective is one of these, where a rank that failed before the ranks met joins them
    (:func:`report_together`)."""
    if not info.enabled:
        yield
        return
    mine: Exception | None = None
    try:
        yield
    except Exception as e:  # noqa: BLE001 - exchanged, then raised again (as agreed, or as itself if a bug)
        mine = e
    outcome = None if mine is None else Outcome.of(mine)
    agreed = settle(all_gather_object(outcome, info), rank0_only=rank0_only)
    if mine is not None and outcome is not None and outcome.bug:
        raise mine
    if agreed is not None:
        raise agreed from None


def report_together(outcome: Outcome, device: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """A start-up error that this rank found before it met the others (a flag's value, a path this node lacks):
    meet them at their first exchange (:func:`all_or_none`) and raise it agreed, so that rank 0 prints it once,
    naming this rank unless every rank failed alike, and no rank waits for this one until ``--dist-timeout``.
    Returns (the caller reports the error itself) when the ranks cannot meet: launch variables or the device
    unusable, or no exchange within ``timeout_s``."""
    try:
        info = setup(device, timeout_s)
        if not info.enabled:
            return
        agreed = settle(all_gather_object(outcome, info))
    except Exception:  # noqa: BLE001 - any failure to meet: this rank prints its own error
        return
    if agreed is not None:
        raise agreed


def _env_count(name: str, default: int, *, below: int | None = None, low: int = 0) -> int:
    """A launch variable as a whole number from ``low`` (and under ``below``), or a RunError naming it (WORLD_SIZE=abc
    was a ValueError traceback)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (below is not None and value >= below):
        span = f"from {low} to {below - 1}" if below is not None else f">= {low}"
        if name in ("RANK", "LOCAL_RANK"):
            span += f" (a rank of {'WORLD_SIZE' if name == 'RANK' else 'LOCAL_WORLD_SIZE'} {below})"
        raise RunError(
            f"launch variable {name}={text!r} is not a whole number {span}: launch the ranks with torchrun (or srun "
            "torchrun), which sets them all, or unset it to run alone"
        )
    return value


def launch_env() -> tuple[int, int, int]:
    """(WORLD_SIZE, RANK, LOCAL_RANK), each checked before any rank waits for another: one line naming the
    variable for a value that is no whole number, a RANK outside WORLD_SIZE, a LOCAL_RANK outside
    LOCAL_WORLD_SIZE, a MASTER_PORT that is no port, or a variable the ranks need missing."""
    world = _env_count("WORLD_SIZE", 1, low=1)
    missing = [name for name in _LAUNCH_ENV if world > 1 and not os.environ.get(name)]
    if missing:  # torch's own error is a ValueError traceback from its rendezvous
        raise RunError(
            f"WORLD_SIZE is {world} but {', '.join(missing)} is not set: launch the ranks with torchrun "
            "(or srun torchrun), which sets them all"
        )
    rank = _env_count("RANK", 0, below=world)
    local_world = _env_count("LOCAL_WORLD_SIZE", world, low=1)
    local_rank = _env_count("LOCAL_RANK", 0, below=local_world)
    if world > 1:
        _env_count("MASTER_PORT", 0, low=1, below=65536)
    return world, rank, local_rank


def setup_run(run: RunConfig) -> DistInfo:
    """:func:`setup` for a training run: the run section's device and peer timeout (read here only; both loops
    pass the section)."""
    return setup(run.device, run.dist_timeout)


def setup_on(chosen: DeviceConfig) -> DistInfo:
    """:func:`setup` for a command without peers (``embed``): the device its section was given."""
    return setup(chosen.device)


def launch_flags(args: Sequence[str]) -> tuple[str, float]:
    """``--device`` and ``--dist-timeout`` as the command line ``args`` gives them, read as they are, for an
    error found before the flags parsed (:func:`report_together`): the device ``auto`` when not given; the
    timeout its default when not given or not one the flag takes (maybe the error itself: 1e300 s would overflow
    the process group's timedelta)."""
    try:
        seconds = float(_given(args, "--dist-timeout") or DEFAULT_TIMEOUT_S)
    except ValueError:
        seconds = DEFAULT_TIMEOUT_S
    timeout_s = seconds if MIN_TIMEOUT_S <= seconds <= MAX_TIMEOUT_S else DEFAULT_TIMEOUT_S
    return _given(args, "--device") or "auto", timeout_s


def _given(args: Sequence[str], name: str) -> str | None:
    """``name``'s value in ``args``, read as it is (the flags did not parse)."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def setup(device: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> DistInfo:
    world, rank, local_rank = launch_env()
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if use_cuda:
        if not torch.cuda.is_available():  # else torch fails deep inside with an AttributeError or RuntimeError
            raise RunError(f"--device {device}: no CUDA GPU is visible to this process; use --device cpu or auto")
        index = int(device.split(":", 1)[1]) if ":" in device else local_rank
        if index >= torch.cuda.device_count():
            raise RunError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible")
        torch.cuda.set_device(index)
        dev = torch.device("cuda", index)
    else:
        dev = torch.device("cpu")
    info = DistInfo(rank=rank, local_rank=local_rank, world_size=world, device=dev, timeout_s=timeout_s)
    if world > 1 and not dist.is_initialized():
        watch_sigterm()
        show_stacks_on_sigusr1()
        # A rank whose peers never come waits the whole timeout (300 s by default): said once it has waited a
        # while, so that a lone rank is no silent hang.
        note = threading.Timer(min(WAIT_NOTE_S, timeout_s / 2), _say_waiting, args=(world, rank, timeout_s))
        note.daemon = True
        note.start()
        try:
            dist.init_process_group(
                backend="nccl" if use_cuda else "gloo",
                device_id=dev if use_cuda else None,
                timeout=timedelta(seconds=timeout_s),
                **_restart_store(world, rank, timeout_s),
            )
        except (dist.DistError, RuntimeError) as e:  # a lone rank, a rank 0 that never came: a store traceback
            where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
            raise RunError(
                f"WORLD_SIZE={world}, RANK={rank}: the ranks did not meet at MASTER_ADDR:MASTER_PORT {where} within "
                f"{waited(timeout_s)} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): "
                "start every rank (torchrun --nproc-per-node N sets them), or unset WORLD_SIZE to run alone"
            ) from None
        finally:
            note.cancel()
        PEERS.start(rank, world, timeout_s)
    return info


WAIT_NOTE_S = 10.0  # a rank waiting this long for its peers says so (half the timeout when that is shorter)


def _say_waiting(world: int, rank: int, timeout_s: float) -> None:
    where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    progress.write(
        f"[berttrain] rank {rank} of WORLD_SIZE {world} waits for the other ranks at MASTER_ADDR:MASTER_PORT {where} "
        f"(up to {waited(timeout_s)})"
    )


def _restart_store(world: int, rank: int, timeout_s: float) -> dict[str, Any]:
    """The process group's store under torchrun's static rendezvous (``--master-port``; the agent hosts one store
    for every restart): the keys of this restart's own prefix. torch reads it unprefixed, so a restart found the
    addresses that the killed incarnation's ranks had published and every rank failed to connect to them (gloo
    connectFullMesh 'Connection refused', 3 restarts of 3). c10d rendezvous prefixes each round itself: nothing."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=False,
        timeout=timedelta(seconds=timeout_s),
    )
    return {"store": dist.PrefixStore(f"bertstream/process_group/{restart}", store), "rank": rank, "world_size": world}


def launched_main() -> bool:
    """Whether this process is rank 0 of its launch (or runs alone): what a command's closing line is printed
    by, after the process group is gone, so ``torchrun`` shows it once and not once per rank."""
    return os.environ.get("RANK", "0").strip() in ("0", "")  # not a number: launch_env says so, on every rank


# How long a rank may take to end once every rank has finished (drained and met). A process that is
# still there then is stuck in a teardown (a destructor waiting on the GIL or on a peer: see teardown): it prints
# every thread's stack and exits 1, instead of holding its GPUs (and the job) until the cluster's time limit.
EXIT_GRACE_S = 120.0


def teardown() -> None:
    """The end of a run's process group, on every rank, once the run's loop has returned (its DDP model, whose
    reducer holds the group, gone with it).

    Every rank drains its collectives (a barrier), meets the others through the rendezvous store, destroys the
    group, and meets them again: no rank leaves while a peer still talks to it. The first meeting is why the
    group is not destroyed right after the barrier: its destructor joins the group's worker threads while holding
    the GIL (pybind's dealloc), and a worker that has just run the barrier may still be releasing that work, whose
    earlier collectives hold tensors Python owns; destroyed at once, the worker waited for the GIL and the join
    for the worker (py-spy of a two-rank gloo test hung at load: the main thread in ~Reducer ->
    ~ProcessGroupGloo -> thread join, the gloo thread in ~AsyncBarrierWork -> ~AsyncAllgatherWork ->
    decref_pyobject -> GIL acquire). The store's round trips release the GIL, and the worker takes it then.
    (Keeping the group alive to the interpreter's end instead left its threads running at exit: a rank aborted
    with 'terminate called without an active exception'.)"""
    PEERS.stop()
    if not dist.is_initialized():
        return
    world = dist.get_world_size()
    if world > 1:
        with contextlib.suppress(RuntimeError, dist.DistError):
            dist.barrier()
        PEERS.meet("drained", world, EXIT_GRACE_S)
        # faulthandler's own thread: it runs even while the main thread holds the GIL in a C++ destructor
        faulthandler.dump_traceback_later(EXIT_GRACE_S, exit=True)
    dist.destroy_process_group()
    if world > 1:
        PEERS.meet("ended", world, EXIT_GRACE_S)


def end_together() -> None:
    """Wait until every rank is here, then end the process group: the ranks' last step after an error they
    all raised alike, once rank 0 has printed it (a peer that is gone or stopped answering ends the wait)."""
    if not dist.is_initialized():
        return
    try:
        dist.barrier()
    except (RuntimeError, dist.DistError):
        return
    teardown()


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def broadcast_object(obj, info: DistInfo):
    """Rank 0's ``obj`` on every rank."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_object(obj, info: DistInfo) -> list:
    """Every rank's ``obj``, in rank order."""
    if not info.enabled:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_tensor(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Rank 0's ``t`` on every rank (in place)."""
    if info.enabled:
        dist.broadcast(t, src=0)
    return t


def agree(facts: dict[str, Any], info: DistInfo, why: str) -> None:
    """Every rank's ``facts`` (name -> value, in the order to compare) equal rank 0's, or :class:`Disagreement`
    on every rank, naming the first rank and the first name that differ; ``why`` ends the line."""
    views = all_gather_object(facts, info)
    for rank, view in enumerate(views):
        for name, value in views[0].items():
            if view.get(name) != value:
                raise Disagreement(f"rank {rank} has {name} {view.get(name)}, rank 0 {value}: {why}")


def code_digest() -> str:
    """A digest of this installation's bertstream sources: ranks of one run must run the same code (the package
    version stays 0.1.0 across changes)."""
    root = Path(__file__).resolve().parent.parent  # the folder that holds trainer/, schemas/, cli/
    h = hashlib.sha256()
    for package in ("trainer", "schemas", "cli"):
        for path in sorted((root / package).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]
