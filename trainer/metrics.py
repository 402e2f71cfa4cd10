"""Metrics: one JSON object per logged step in ``RUN_DIR/metrics.jsonl``, TensorBoard, a console bar.

Throughput is measured honestly: wall time between two log points (data loading, host syncs and all),
after synchronising the device, over the sequences and real (non-padding) tokens actually processed.
MFU = achieved model FLOP/s (counted from the padded shapes of each step) / the device's peak.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from bertstream.schemas import json_text
from bertstream.schemas.redact import redact_values
from bertstream.trainer.errors import RunError
from bertstream.trainer.trackers import open_trackers

METRICS_FILE = "metrics.jsonl"

# Dense bf16 tensor-core peaks (FLOP/s), by substring of torch.cuda.get_device_name().
_PEAK_BF16 = (
    ("H200", 989e12),
    ("H100", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("A10G", 125e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("4090", 165e12),
    ("V100", 125e12),
)


def device_peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in _PEAK_BF16 if key in name), None)


class Throughput:
    """Sequences, real tokens and model FLOPs since the last ``read``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak = device_peak_flops(device)
        self._reset(time.perf_counter())

    def _reset(self, now: float) -> None:
        self.t0, self.seqs, self.tokens, self.flops = now, 0, 0, 0.0

    def add(self, seqs: int, tokens: int, flops: float) -> None:
        self.seqs += seqs
        self.tokens += tokens
        self.flops += flops

    def read(self) -> dict[str, float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        dt = max(now - self.t0, 1e-9)
        out = {"seq_per_s": self.seqs / dt, "tokens_per_s": self.tokens / dt}
        if self.peak:
            out["mfu"] = self.flops / dt / self.peak
        self._reset(now)
        return out


class MetricsLogger:
    """Rank 0 only writes; other ranks get a logger whose methods do nothing."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        enabled: bool,
        tensorboard: bool = True,
        trackers: tuple[str, ...] | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        """``trackers``: ``--report-to`` (:mod:`bertstream.trainer.trackers`), given the run's flags ``params``;
        None: TensorBoard unless ``tensorboard`` is False."""
        self.enabled = enabled
        self.path = Path(run_dir) / METRICS_FILE
        names = trackers if trackers is not None else (("tensorboard",) if tensorboard else ())
        self._trackers = open_trackers(Path(run_dir), names, params or {}) if enabled else []

    def truncate_after(self, step: int) -> None:
        """On resume: forget records past the restored step, so the file is one consistent history."""
        if not self.enabled or not (self.path.exists() or self.path.is_symlink()):
            return
        if self.path.is_symlink():  # it was written through: into another run's log, or any file the link names
            raise RunError(
                f"{self.path} is a link (to {self.path.readlink()}): a run writes its metrics only inside its folder"
            )
        records = read_metrics(self.path.parent)
        odd = next((n for n, r in enumerate(records, 1) if not has_step(r)), None)
        if odd is not None:  # a KeyError or TypeError traceback before
            raise RunError(
                f"{self.path}: record {odd} has no step (an integer >= 0): the file was edited or is not this run's "
                "log; move it away to resume"
            )
        keep = [json.dumps(r) for r in records if r["step"] <= step]  # a torn last line goes
        self.path.write_text("".join(line + "\n" for line in keep))

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        clean = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in redact_values(record).items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if self._trackers:
            numbers = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
            for tracker in self._trackers:
                tracker.log(record.get("split", "train"), numbers, record["step"])

    def close(self) -> None:
        for tracker in self._trackers:
            tracker.close()
        self._trackers = []


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {METRICS_FILE}")
    if not path.is_file():  # a FIFO was read until someone wrote to it: plot and resume hung
        raise RunError(f"{path}: not a regular file (a FIFO, a device or a folder), so no metrics log")
    records = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                records.append(json_text.loads(line))
            except json.JSONDecodeError as e:
                if n == len(lines):  # a run killed mid-write tears at most its last line
                    break
                raise RunError(
                    f"{path}:{n}: not a JSON record ({e.msg}): the file was edited or is not a metrics log"
                ) from None
    return records


def has_step(record: Any) -> bool:
    """Whether a metrics record has the step every record is written with (an integer >= 0, not a bool)."""
    if not isinstance(record, dict):
        return False
    step = record.get("step")
    return isinstance(step, int) and not isinstance(step, bool) and step >= 0


def tracked(cfg: Any) -> dict[str, Any]:
    """A run config's flags as trackers take them (a URL's password left out, as in every file the run writes)."""
    from bertstream.cli import options

    return redact_values(options.flat(cfg))
