"""The ``--output`` folder, checked before any work: a folder we can write, holding no other dataset.

Outputs are owned: a folder a command writes into is empty, or holds that command's own earlier run (replaced
only with ``--overwrite``), or is refused, whatever ``--overwrite`` says. A folder with a ``manifest.json``
holds a dataset; shard or temporary files without one are the leftovers of a run that was killed, and are
called that. Nothing the run reads (inputs, vocabulary, ``--label-set-from``) may lie inside it.
"""

from __future__ import annotations

import os
import uuid

from bertstream.pipelines.common.runner import UsageError
from bertstream.schemas.manifest import MANIFEST_NAME


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


# Beside a dataset's own files, a folder may hold these without being someone else's: the run's work
# folder, the lock, and `bertprep report`'s default output.
OWN_EXTRAS = ("_work", "report")


def foreign_files(output_dir: str, is_output, names: list[str]) -> list[str]:
    """The names in ``output_dir`` that are not this command's (dotfiles such as the lock are ignored)."""
    return sorted(n for n in names if not n.startswith(".") and n not in OWN_EXTRAS and not is_output(n))


def refuse_foreign(output_dir: str, foreign: list[str], what: str) -> None:
    """An ``--output`` holding files another command (or a person) put there is never cleared or mixed into."""
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise UsageError(
            "output",
            f"{output_dir} holds files that are not {what} ({', '.join(foreign[:3])}{more}); bertprep writes "
            "into an empty folder or over its own earlier run only: choose another --output",
        )
