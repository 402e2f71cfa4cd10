"""Metrics: one JSON object per logged step in ``RUN_DIR/metrics.jsonl``, TensorBoard, a console bar.

Throughput is measured honestly: wall time between two log points (data loading, host syncs and all),
after synchronising the device, over the sequences and real (non-padding) tokens actually processed.
MFU = useful model FLOP/s (each sequence at its real length: ``model_config.batch_flops``) / the device's peak;
HFU beside it counts what the model computed, padding included. Peaks: :func:`device_peak`.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bertstream.schemas import json_text
from bertstream.schemas.redact import redact_values
from bertstream.trainer.checkpoint import write_text_atomic
from bertstream.trainer.errors import RunError
from bertstream.trainer.trackers import open_trackers

METRICS_FILE = "metrics.jsonl"

# Dense (no sparsity) 16-bit tensor-core peaks, FLOP/s, from the vendors' data sheets: bf16, or fp16 where the
# device has no bf16 (V100, T4). Matched in order on torch.cuda.get_device_name(), upper-cased: the SXM, PCIe
# and NVL parts of one chip differ (H100: 989, 756, 835 TFLOP/s) and name themselves ("NVIDIA H100 PCIe",
# "NVIDIA H100 NVL"; the SXM part is "NVIDIA H100 80GB HBM3"); an H100 with HBM2e memory is the PCIe card.
_PEAKS: tuple[tuple[str, str, float], ...] = (
    (r"GH200", "GH200", 989e12),
    (r"H200.*NVL", "H200 NVL", 835e12),
    (r"H200", "H200 SXM", 989e12),
    (r"H100.*NVL", "H100 NVL", 835e12),
    (r"H100.*(PCIE|HBM2E)", "H100 PCIe", 756e12),
    (r"H100", "H100 SXM", 989e12),
    (r"H800.*PCIE", "H800 PCIe", 756e12),
    (r"H800", "H800 SXM", 989e12),
    (r"\bH20\b", "H20", 148e12),
    (r"\bB200\b", "B200", 2250e12),
    (r"\bA100\b", "A100", 312e12),  # 40 and 80 GB, SXM and PCIe alike
    (r"\bA800\b", "A800", 312e12),
    (r"\bA30\b", "A30", 165e12),
    (r"\bA40\b", "A40", 149.7e12),
    (r"\bA10\b", "A10", 125e12),  # not the A10G (AWS publishes no peak for it): measured
    (r"L40S", "L40S", 362e12),
    (r"\bL40\b", "L40", 181e12),
    (r"\bL4\b", "L4", 121e12),
    (r"RTX 6000 ADA", "RTX 6000 Ada", 364e12),
    (r"RTX A6000", "RTX A6000", 154.8e12),
    (r"RTX 4090", "RTX 4090", 165e12),
    (r"V100S", "V100S (fp16)", 130e12),
    (r"V100.*PCIE", "V100 PCIe (fp16)", 112e12),
    (r"V100", "V100 SXM2 (fp16)", 125e12),
    (r"\bT4\b", "T4 (fp16)", 65e12),
    (r"MI300X|MI325X", "MI300X", 1307e12),
    (r"MI250X", "MI250X", 383e12),
)


def peak_for_name(name: str) -> tuple[str, float] | None:
    """``(model, dense 16-bit FLOP/s)`` of a CUDA device name from the table, or None (not listed)."""
    upper = name.upper()
    return next(((model, peak) for pattern, model, peak in _PEAKS if re.search(pattern, upper)), None)


def measured_peak(device: torch.device, size: int = 4096, repeats: int = 20) -> float:
    """bf16 matmul FLOP/s this device reaches (a few milliseconds): the peak of a device not in the table."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - t0)


def device_peak(device: torch.device) -> tuple[float | None, str]:
    """``(peak FLOP/s, where it came from)``: the table's (``"table: H100 SXM"``), a short bf16 matmul's for a
    CUDA device the table lacks (``"measured: NAME"``), or none on the CPU (MFU left out)."""
    if device.type != "cuda":
        return None, f"none ({device.type}: no MFU)"
    name = torch.cuda.get_device_name(device)
    known = peak_for_name(name)
    if known is not None:
        return known[1], f"table: {known[0]}"
    return measured_peak(device), f"measured: {name} (bf16 matmul)"


def device_peak_flops(device: torch.device) -> float | None:
    return device_peak(device)[0]


class Throughput:
    """Sequences, real tokens and model FLOPs (useful and computed) since the last ``read``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak, self.peak_source = device_peak(device)
        self._reset(time.perf_counter())

    def _reset(self, now: float) -> None:
        self.t0, self.seqs, self.tokens, self.flops, self.computed = now, 0, 0, 0.0, 0.0

    def add(self, seqs: int, tokens: int, flops: float, computed: float | None = None) -> None:
        """``flops``: the useful work (real tokens); ``computed``: what ran, padding included (default: the same)."""
        self.seqs += seqs
        self.tokens += tokens
        self.flops += flops
        self.computed += flops if computed is None else computed

    def read(self) -> dict[str, Any]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        dt = max(now - self.t0, 1e-9)
        out: dict[str, Any] = {"seq_per_s": self.seqs / dt, "tokens_per_s": self.tokens / dt}
        if self.peak:  # MFU over real tokens; HFU over every position computed
            out["mfu"] = self.flops / dt / self.peak
            out["hfu"] = self.computed / dt / self.peak
            out["peak_source"] = self.peak_source
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
        # Replaced, never rewritten in place: a full disk or a kill mid-write cut the history the checkpoint
        # covers (records 1..50 gone, and the next resume went on without a word).
        write_text_atomic(self.path, "".join(line + "\n" for line in keep))

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        clean = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in redact_values(record).items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if self._trackers:
            numbers = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
            for tracker in list(self._trackers):
                try:
                    tracker.log(record.get("split", "train"), numbers, record["step"])
                except Exception as e:  # noqa: BLE001 - any client's failure: the run and metrics.jsonl go on
                    self._drop(tracker, f"at step {record['step']}", e)

    def _drop(self, tracker: Any, when: str, error: BaseException) -> None:
        """A tracker whose server went away mid-run (after its client's own retries) is left, said in one line:
        the run stopped on its exception before, hours of training for a dashboard; metrics.jsonl holds every
        record it missed."""
        self._trackers.remove(tracker)
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        print(
            f"[berttrain] warning: {type(tracker).__name__} stopped taking metrics {when} ({first[:300]}); the run "
            f"goes on and {self.path} keeps every record",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        for tracker in list(self._trackers):
            try:
                tracker.close()
            except Exception as e:  # noqa: BLE001 - as in log: the run's own files are written
                self._drop(tracker, "at the end", e)
        self._trackers = []


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {METRICS_FILE}")
    if not path.is_file():  # a FIFO was read until someone wrote to it: plot and resume hung
        raise RunError(f"{path}: not a regular file (a FIFO, a device or a folder), so no metrics log")
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:  # a binary file in its place: a traceback in plot and resume
        raise RunError(f"{path}: not a metrics log (byte {e.start} is not UTF-8 text)") from None
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
