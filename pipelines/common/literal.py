"""Paths as paths, never patterns: listing and deleting what a run writes, on every filesystem.

Beam's ``FileSystems.match`` reads every path as a glob (``[``, ``]``, ``*``, ``?``), and so does its
``delete`` on a local disk and on GCS (each matches first, then deletes what matched): an ``--output`` named
``runs/exp[lr=1e-4]`` matched nothing (every run failed with "no files found to delete"), and ``out[1]``
matched a sibling ``out1``, whose files ``--overwrite`` deleted. Here a local path is listed and removed with
the OS (never through a link), and an object-store path is escaped where Beam would match it: Beam's
``translate_pattern`` has no escape character, but a one-character class is one (``[[]`` matches ``[``,
``[]]`` matches ``]``), and S3, Azure and HDFS delete the names they are given as they are. Input patterns
(``--input 'corpus/*.txt'``) are patterns on purpose and do not come here.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import FileSystems

GLOB_CHARS = "[]*?"
# Object stores whose Beam ``delete`` matches its paths as patterns before deleting (GcsFileSystem.delete).
_DELETE_MATCHES = ("gs",)


def glob_escape(path: str) -> str:
    """``path`` as a Beam pattern that matches ``path`` alone: each glob character in a class of its own."""
    return "".join(f"[{c}]" if c in GLOB_CHARS else c for c in path)


@contextmanager
def _escaped() -> Iterator[None]:
    """Around Beam's match of an escaped path: Python warns of "[[]" as a possible nested set of a future
    version (a FutureWarning that Python prints); Beam's translation of "[[]" is the class of "[" alone today."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Possible nested set", FutureWarning)
        yield


def _scheme(path: str) -> str:
    return path.split("://", 1)[0].lower() if "://" in path else ""


def files_below(folder: str) -> list[str]:
    """Every file below ``folder`` (at any depth; on an object store, every object under the prefix
    ``folder/``), sorted; none when there is no such folder. Local links are listed, never followed."""
    if "://" not in folder:
        found = []
        for root, dirs, files in os.walk(folder):
            found += [os.path.join(root, n) for n in files]
            found += [os.path.join(root, d) for d in dirs if os.path.islink(os.path.join(root, d))]
        return sorted(found)
    prefix = folder.rstrip("/") + "/"
    # "**", not "*": "*" stops at a "/", and a folder in it (a dataset's eval/) would go unseen
    with _escaped():
        found = FileSystems.match([glob_escape(prefix) + "**"])
    return sorted(m.path for r in found for m in r.metadata_list)


def metadata(path: str) -> FileMetadata | None:
    """Beam's ``FileMetadata`` (size, modification time) of the one file ``path``, or None when it is not there."""
    with _escaped():
        found = FileSystems.match([glob_escape(path)])[0].metadata_list
    return found[0] if found else None


def delete(paths: Iterable[str]) -> None:
    """Delete each path, a file or (local) a folder with all it holds; a path that is not there is skipped. A
    local link is removed, not what it leads to."""
    local: list[str] = []
    urls: list[str] = []
    for p in paths:
        (urls if "://" in p else local).append(p)
    for p in local:
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.remove(p)
        except FileNotFoundError:
            pass
    if urls:
        escape = [_scheme(p) in _DELETE_MATCHES and not p.endswith("/") for p in urls]  # "x/": a prefix, deleted as one
        with _escaped():
            FileSystems.delete([glob_escape(p) if e else p for p, e in zip(urls, escape, strict=True)])
