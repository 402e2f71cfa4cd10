"""Host reads and device syncs per training step of the real ``berttrain pretrain`` (the GPU suite's part e).

The command runs in this process (``bertstream.trainer.cli.main``) twice, for ``short`` and ``long`` steps, each
logging and checkpointing only at its last step; the difference of the two counts over the difference of the
steps is what one non-logging step costs, start-up and the final log and checkpoint cancelling out. Counted:

- ``host_reads``: calls that read a tensor's value into Python (``item``, ``tolist``, ``bool``, ``float``,
  ``int``) made in this process (loader workers are other processes), by call site; ``project_reads``, those
  made by bertstream's own code (torch's CPU AdamW reads its step counts itself, for one);
- ``device_reads``: those of a tensor on the device (on CUDA each waits for the stream: the loop stalls);
- ``cuda_syncs`` (CUDA only): every synchronizing CUDA call torch reports under
  ``torch.cuda.set_sync_debug_mode("warn")``, the reads above and those made inside torch alike.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

_READS = ("item", "tolist", "__bool__", "__float__", "__int__")


@contextlib.contextmanager
def counted(device: torch.device) -> Iterator[dict[str, Any]]:
    """The counts of the block (see the module's docstring), filled in as it leaves."""
    sites: Counter[str] = Counter()
    counts: dict[str, Any] = {
        "host_reads": 0,
        "project_reads": 0,
        "device_reads": 0,
        "cuda_syncs": None,
        "sites": sites,
    }
    originals = {name: getattr(torch.Tensor, name) for name in _READS}

    def wrap(name: str) -> Any:
        real = originals[name]

        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counts["host_reads"] += 1
            if str(sys._getframe(1).f_globals.get("__name__", "")).startswith("bertstream."):
                counts["project_reads"] += 1
            if self.device.type != "cpu":
                counts["device_reads"] += 1
            caller = traceback.extract_stack(limit=2)[0]
            sites[f"{Path(caller.filename).name}:{caller.lineno} {name}"] += 1
            return real(self, *args, **kwargs)

        return read

    cuda = device.type == "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in _READS:
            setattr(torch.Tensor, name, wrap(name))
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            yield counts
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
            for name, real in originals.items():
                setattr(torch.Tensor, name, real)
    if cuda:
        counts["cuda_syncs"] = sum("synchronizing" in str(w.message) for w in caught)


def pretrain_reads(
    shards: Path, *, preset: str, batch_size: int, short: int, long: int, device: torch.device, flags: list[str]
) -> dict[str, Any]:
    """Counts per non-logging step of ``berttrain pretrain`` on ``shards`` (see the module's docstring);
    ``flags``: more of the command's flags (compilation, unpadding)."""
    from bertstream.trainer.cli import main

    runs = {}
    with tempfile.TemporaryDirectory(prefix="host-reads-") as tmp:
        for steps in (short, long):
            args = ["pretrain", "--data", str(shards), "--model", preset, "--output", f"{tmp}/run{steps}"]
            args += ["--batch-size", str(batch_size), "--max-steps", str(steps), "--log-every", str(steps)]
            args += ["--checkpoint-every", str(steps), "--warmup-steps", "1", "--num-workers", "1"]
            args += ["--no-tensorboard", "--device", device.type, *flags]
            with counted(device) as counts:
                main(args, standalone_mode=False)
            runs[steps] = counts
    a, b = runs[short], runs[long]
    per_step = {
        k: (round((b[k] - a[k]) / (long - short), 2) if b[k] is not None else None)
        for k in ("host_reads", "project_reads", "device_reads", "cuda_syncs")
    }
    grown = {site: n - a["sites"].get(site, 0) for site, n in b["sites"].items() if n > a["sites"].get(site, 0)}
    per_step["sites_per_step"] = {
        site: round(n / (long - short), 2) for site, n in sorted(grown.items(), key=lambda kv: -kv[1])[:12]
    }
    per_step["steps"] = [short, long]
    return per_step
