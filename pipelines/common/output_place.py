"""Where a ``bertprep`` ``--output`` may lie: not over anything the run reads, not inside another dataset's folder
or a folder a run is writing (its lock). Checked by :func:`bertstream.pipelines.common.output_dir.claim_output`
before the folder is touched."""

from __future__ import annotations

import json
import os

from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import read_whole
from bertstream.schemas.manifest import MANIFEST_NAME

LOCK_NAME = ".bertprep.lock"  # one run per folder at a time (output_dir.lock_output takes it)


def manifest_kind(output_dir: str) -> str | None:
    """The ``kind`` of the manifest in ``output_dir`` (None: no manifest, or one that cannot be read)."""
    try:
        kind = json.loads(read_whole(FileSystems.join(output_dir, MANIFEST_NAME), "the manifest")).get("kind")
    except Exception:  # noqa: BLE001 - an unreadable manifest is a killed run's leftover
        return None
    return kind if isinstance(kind, str) else None


def _resolved(path: str) -> str:
    """A path compared as the filesystem sees it: links resolved (URLs as they are, without a trailing /)."""
    return path.rstrip("/") if "://" in path else os.path.realpath(os.path.expanduser(path))


def inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies below it, links resolved."""
    p, f = _resolved(path), _resolved(folder)
    return p == f or p.startswith(f.rstrip("/") + "/")


def check_no_overlap(output_dir: str, needs: dict[str, list[str]]) -> None:
    """Refuse an ``--output`` that holds something the run reads (``needs``: flag -> paths): clearing or
    writing the folder would destroy it, and its files would be read as they are being replaced."""
    for flag, paths in needs.items():
        within = [p for p in paths if p and inside(p, output_dir)]
        if within:
            more = f" and {len(within) - 1} more" if len(within) > 1 else ""
            what = "inputs" if flag == "input" else f"--{flag}"
            raise UsageError(
                "output",
                f"{output_dir} overlaps {what}: {within[0]}{more} lies inside it"
                + (" (--input)" if flag == "input" else "")
                + "; write the dataset to another folder",
            )


def check_not_inside_a_dataset(output_dir: str) -> None:
    """Refuse a local ``--output`` below a folder that holds a dataset (a bertstream manifest with a ``kind``) or
    a run's lock: the new run's folder was mixed into that dataset (while its run wrote it, too), and the
    dataset could no longer be replaced (``--overwrite`` refuses a folder holding what is not its own)."""
    if "://" in output_dir:
        return
    path = os.path.dirname(_resolved(output_dir))
    while True:
        if manifest_kind(path) is not None or os.path.lexists(os.path.join(path, LOCK_NAME)):
            raise UsageError(
                "output",
                f"{output_dir} lies inside {path}, a dataset's folder (or one a run is writing): its files would "
                "be mixed into that dataset; choose an --output outside it",
            )
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent
