"""The ``--output`` folder, checked before any work: a folder we can write, holding no other dataset.

A folder with a ``manifest.json`` holds a dataset; shard or temporary files without one are the leftovers of
a run that was killed, and are called that.
"""

from __future__ import annotations

import os
import uuid

from pipelines.runner import UsageError
from schemas.manifest import MANIFEST_NAME


def ensure_writable_dir(output_dir: str) -> None:
    """Create a local ``--output`` folder if needed and prove it writable; URLs are checked by the run itself
    (object stores have no folders and no permissions to read up front)."""
    if "://" in output_dir:
        return
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UsageError("output", f"{output_dir} is a file; --output must be a folder")
    probe = os.path.join(output_dir, f".bertprep-write-test-{uuid.uuid4().hex}")
    try:
        os.makedirs(output_dir, exist_ok=True)
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        raise UsageError("output", f"cannot write to {output_dir}: {e.strerror or e}") from None


def refusal(output_dir: str, existing: list[str]) -> str:
    """Why ``existing`` files stop a run without ``--overwrite``: a finished dataset, or leftovers."""
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in existing]
    if MANIFEST_NAME in names:
        return (
            f"{output_dir} already holds a dataset ({MANIFEST_NAME} and {len(existing) - 1} other files); "
            "pass --overwrite to replace it"
        )
    files = f"{len(existing)} file" + ("s such as " if len(existing) > 1 else ": ")
    return (
        f"{output_dir} holds leftovers of an unfinished run (no {MANIFEST_NAME}; {files}{names[0]}); "
        "pass --overwrite to remove them"
    )
