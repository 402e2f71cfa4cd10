"""Process-group set-up under ``torchrun`` (NCCL on GPU, gloo on CPU) and small collective helpers.

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) everything runs as a single process and every
helper is a no-op, so the same training code serves a laptop and a multi-node cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bertstream.trainer.errors import RunError


@dataclass(frozen=True, slots=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto") -> DistInfo:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
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
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", device_id=dev if use_cuda else None)
    return DistInfo(rank=rank, local_rank=local_rank, world_size=world, device=dev)


def launched_main() -> bool:
    """Whether this process is rank 0 of its launch (or runs alone): what a command's closing line is printed
    by, after the process group is gone, so ``torchrun`` shows it once and not once per rank."""
    return int(os.environ.get("RANK", "0")) == 0


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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
