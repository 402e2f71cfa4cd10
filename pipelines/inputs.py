"""Input resolution, shared by every pipeline (pretraining, vocabulary, tasks): ``--input`` paths and globs on
any Beam filesystem -> sorted ``InputFile``s with their sizes, formats and corpus-relative names.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import FileSystems

from pipelines.config import FORMATS
from pipelines.runner import UsageError


@dataclass(frozen=True, slots=True)
class InputFile:
    path: str
    bytes: int
    format: str
    name: str = ""  # the path below the common folder of all inputs: what document ids are made of


def relative_names(paths: list[str]) -> list[str]:
    """Each path below the deepest folder that holds all of them (``/data/wiki/AA/wiki_00`` and
    ``/data/books/a.txt`` -> ``wiki/AA/wiki_00``, ``books/a.txt``; one file -> its base name).

    Document ids are ``name:offset``, so the same corpus gives the same shards wherever it lives: another
    directory, another machine, a bucket instead of a disk.
    """
    parts = [p.split("/") for p in paths]
    common = 0
    if parts:
        folders = [q[:-1] for q in parts]
        while all(len(f) > common and f[common] == folders[0][common] for f in folders):
            common += 1
    return ["/".join(q[common:]) for q in parts]


def absolute(path: str) -> str:
    """A local path made absolute (URLs as they are): workers of a distributed runner would resolve a relative
    path against their own working directory, not the launcher's."""
    return path if "://" in path else os.path.abspath(path)


def split_format(pattern: str, default_format: str) -> tuple[str, str]:
    """``"text:books/*.txt"`` -> ``("text", "books/*.txt")``; no known prefix -> the default format."""
    head, sep, rest = pattern.partition(":")
    if sep and head in FORMATS:
        return head, rest
    return default_format, pattern


def match_pattern(pattern: str) -> list[FileMetadata]:
    """Files matching a path or glob. Local patterns are made absolute and matched by Python's ``glob``
    (recursive ``**``, symbolic links followed): Beam's local match finds nothing for a relative pattern
    with a wildcard in a folder (``corpus*/wiki/*``) and does not descend into linked folders."""
    if "://" in pattern:
        return [m for m in FileSystems.match([pattern])[0].metadata_list if not m.path.endswith("/")]
    pattern = absolute(os.path.expanduser(pattern))
    paths = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
    return [FileMetadata(p, os.path.getsize(p), os.path.getmtime(p)) for p in paths if os.path.isfile(p)]


def resolve_inputs(patterns: list[str], default_format: str = "sentences") -> list[InputFile]:
    """Expand paths and globs on any Beam filesystem; a pattern that matches nothing is an error.

    A pattern may carry its own format (``wikiextractor:wiki/*``), so books and Wikipedia can share one
    run and one random-next pool, as in BERT's own pretraining data.
    """
    if not patterns:
        raise UsageError("input", "no --input given")
    found: dict[str, tuple[int, str]] = {}
    for raw in patterns:
        fmt, pattern = split_format(raw, default_format)
        try:
            files = match_pattern(pattern)
        except Exception as e:
            raise UsageError("input", f"cannot list {pattern!r}: {e}") from None
        if not files:
            raise UsageError("input", f"{pattern!r} matches no files")
        for m in files:
            if m.path in found and found[m.path][1] != fmt:
                raise UsageError("input", f"{m.path} is given as both {found[m.path][1]} and {fmt}")
            found[m.path] = (m.size_in_bytes, fmt)
    # Sorted: the order of --input arguments must not matter.
    paths = sorted(found)
    return [InputFile(p, *found[p], name=n) for p, n in zip(paths, relative_names(paths))]


def input_format_of(files: list[InputFile]) -> str | dict[str, str]:
    """The runs's input format: one name, or each input's own (``{"books/a.txt": "text", ...}``) when they mix."""
    formats = {f.format for f in files}
    if len(formats) == 1:
        return formats.pop()
    return {f.name or f.path: f.format for f in files}


def describe_inputs(files: list[InputFile], shown: int = 3) -> str:
    """``a.txt, b.txt and 4 more``: how an error names the inputs."""
    names = ", ".join(f.path for f in files[:shown])
    return names + (f" and {len(files) - shown} more" if len(files) > shown else "")
