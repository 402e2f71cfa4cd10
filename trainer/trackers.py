"""Experiment trackers beside ``metrics.jsonl``: ``--report-to tensorboard,mlflow,wandb`` (TensorBoard by default;
MLflow and Weights & Biases are optional extras, ``pip install 'bertstream[mlflow]'`` / ``'bertstream[wandb]'``).

Each tracker gets the run's flags once (as parameters / config) and every record the run logs, numbers only, at
its step, with the split as a prefix (``train/loss``, ``eval/mlm_perplexity``), as TensorBoard always had them.
Where a tracker writes is its own setting: MLflow's ``MLFLOW_TRACKING_URI`` (default: a local file store in
``RUN/mlruns``), W&B's ``WANDB_PROJECT``/``WANDB_MODE`` (``offline``: ``RUN/wandb``, synced later). A resumed run
continues the tracker's run of the same folder (its id kept in ``RUN/trackers.json``), as its metrics.jsonl does.
Only rank 0 reports (``MetricsLogger``).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any, Protocol

from bertstream.cli.errors import check
from bertstream.schemas.redact import redact
from bertstream.trainer.errors import RunError

REPORT_TO = ("tensorboard", "mlflow", "wandb")
IDS_FILE = "trackers.json"  # tracker -> its run's id, so a resume continues it


def parse_report_to(text: str) -> tuple[str, ...]:
    """``"tensorboard,mlflow"`` -> the trackers named (``none``: no tracker); an unknown name is refused."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names == ("none",):
        return ()
    unknown = [n for n in names if n not in REPORT_TO]
    check(not unknown, "report_to", f"{', '.join(unknown)}: not one of {', '.join(REPORT_TO)} (or none)")
    check(len(set(names)) == len(names), "report_to", f"names a tracker twice: {text!r}")
    return names


def check_installed(names: tuple[str, ...]) -> None:
    """Each optional tracker named is importable (found, not imported: ``--help`` and a config stay quick), else
    the flag's usage error says what to install."""
    import importlib.util

    for name in names:
        if name in ("mlflow", "wandb") and importlib.util.find_spec(name) is None:
            check(False, "report_to", f"{name} is not installed: pip install 'bertstream[{name}]'")


class Tracker(Protocol):
    def log(self, prefix: str, values: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _ids(run_dir: Path) -> dict[str, str]:
    try:
        saved = json.loads((run_dir / IDS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in saved.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(saved, dict) else {}
    )


def _keep_id(run_dir: Path, name: str, run_id: str) -> None:
    (run_dir / IDS_FILE).write_text(json.dumps({**_ids(run_dir), name: run_id}, indent=2) + "\n")


class TensorBoard:
    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, prefix: str, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(f"{prefix}/{k}", v, step)

    def close(self) -> None:
        self.writer.close()


def _probe_server(uri: str) -> None:
    """A tracking server named by ``MLFLOW_TRACKING_URI`` answers a connection within ``reach.PROBE_SECONDS``, or
    the run stops in one line before any work: MLflow's client retried a closed port silently for minutes
    (seven tries with backoff), the run printing nothing."""
    from bertstream.cli.reach import PROBE_SECONDS, Unreachable, probe_http

    try:
        probe_http(uri, PROBE_SECONDS)
    except Unreachable as e:
        raise RunError(
            f"--report-to mlflow: the tracking server MLFLOW_TRACKING_URI={redact(uri)} {e.why}; start it, fix "
            "the variable, or unset it for a store in RUN/mlruns"
        ) from None


class MLflow:
    def __init__(self, run_dir: Path, params: dict[str, Any]) -> None:
        import os

        import mlflow

        self.mlflow = mlflow
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            # no server named: a local file store in the run folder, which MLflow 3 keeps in maintenance mode
            # behind this switch (its sqlite default needs the full mlflow, not mlflow-skinny)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        else:
            _probe_server(uri)
        try:
            mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "bertstream"))
            run = mlflow.start_run(run_id=_ids(run_dir).get("mlflow"), run_name=run_dir.resolve().name)
        except mlflow.exceptions.MlflowException as e:  # a bad URI, a server that refuses: one line, not a traceback
            first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
            raise RunError(f"--report-to mlflow: MLflow did not start a run ({first})") from None
        _keep_id(run_dir, "mlflow", run.info.run_id)
        try:
            mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        except mlflow.exceptions.MlflowException:
            pass  # a resumed run: its parameters were logged at its start, and MLflow refuses to change one

    def log(self, prefix: str, values: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics({f"{prefix}/{k}": v for k, v in values.items()}, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


class Wandb:
    def __init__(self, run_dir: Path, params: dict[str, Any]) -> None:
        import os

        import wandb

        run_id = _ids(run_dir).get("wandb") or uuid.uuid4().hex[:12]  # W&B's id alphabet: [a-z0-9]
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "bertstream"),
                name=run_dir.resolve().name,
                dir=str(run_dir),
                config=params,
                id=run_id,
                resume="allow",
            )
        except wandb.errors.Error as e:  # no API key, a server that refuses: one line, not a traceback
            first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
            raise RunError(
                f"--report-to wandb: W&B did not start a run ({first}); run `wandb login`, set WANDB_API_KEY, "
                "or WANDB_MODE=offline to sync later"
            ) from None
        except ValueError as e:  # its settings refused (pydantic's ValidationError): WANDB_MODE=sideways
            said = "; ".join(line.strip() for line in str(e).splitlines()[:3] if line.strip())
            raise RunError(
                f"--report-to wandb: W&B refused its settings ({said}): check the WANDB_* variables"
            ) from None
        _keep_id(run_dir, "wandb", run_id)

    def log(self, prefix: str, values: dict[str, float], step: int) -> None:
        self.run.log({f"{prefix}/{k}": v for k, v in values.items()}, step=step)

    def close(self) -> None:
        self.run.finish()


def open_trackers(run_dir: Path, names: tuple[str, ...], params: dict[str, Any]) -> list[Tracker]:
    """The trackers ``names`` for ``run_dir``. TensorBoard missing is a note (it was always best-effort); MLflow or
    W&B asked for and missing is an ``ImportError`` (one line naming the extra: ``cli.errors.OPTIONAL_PACKAGES``)."""
    out: list[Tracker] = []
    for name in names:
        if name == "tensorboard":
            try:
                out.append(TensorBoard(run_dir))
            except ImportError:
                print("[berttrain] tensorboard is not installed: metrics go to metrics.jsonl only", file=sys.stderr)
        elif name == "mlflow":
            out.append(MLflow(run_dir, params))
        elif name == "wandb":
            out.append(Wandb(run_dir, params))
    return out
