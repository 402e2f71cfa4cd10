"""Folders and files a command writes whole (``berttrain export-hf``, ``bertprep report``; ``berttrain embed``'s
and ``plot``'s ``--output``): commands own what they write.

:func:`check_owned` refuses a folder that holds anything the command does not write (a dataset, a user's site),
whatever ``--overwrite`` says, and the command's own files of an earlier run unless that run is marked as the
command's (``marker``) or ``--overwrite`` is given. :func:`publish` then writes into a temporary sibling folder
and moves the files in only once all are written: a full disk or a failure half-way leaves the folder as it was
(no empty folder, no half an export). The temporary folder of a run killed outright (``kill -9``, a lost
node: no clean-up ran) is removed by the next :func:`publish` to the same folder, once its process is gone.

A file written whole at ``--output`` is declared and checked here too, once for the commands that write one:
:class:`OutputFile` (``embed``'s Arrow file, a section of its config: replaced only with ``--overwrite``, never a
folder nor one of the command's inputs) and :func:`output_option` with :func:`output_file` (``plot``'s figure:
replaced only when it is one the command drew). The words that refuse one, and what an interrupted command
leaves there (:data:`NOT_WRITTEN`), are said here; each command gives only its own nouns.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from bertstream.cli.errors import UsageError, check
from bertstream.cli.lock import pid_alive
from bertstream.cli.options import opt, single_option

# What an interrupted command that writes one file whole leaves (``berttrain embed``'s line): nothing at --output.
NOT_WRITTEN = "--output was not written (it is written whole, at the end)"


def overwrite_option(help: str) -> Callable[[Callable], Callable]:
    """``--overwrite`` of a command that writes a folder whole (``berttrain export-hf``): what it lets
    :func:`check_owned` replace, worded by ``help``."""
    return click.option("--overwrite", is_flag=True, help=help)


def output_option(help: str) -> Callable[[Callable], Callable]:
    """``--output`` of a command that writes one file whole and has no config (``berttrain plot``): where
    :func:`output_file` puts it, worded by ``help``."""
    return single_option("--output", help=help)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputFile:
    """``--output``, a file the command writes whole, and ``--overwrite``, which lets it replace one already there
    (``berttrain embed``'s Arrow file: its config holds this section, with its own help)."""

    output: str = opt(help="File to write.")
    overwrite: bool = opt(False, "Replace an existing --output.")

    def __post_init__(self) -> None:
        check(bool(self.output), "output", "is required")

    def target(self, inputs: Iterable[tuple[str, str]], *, what: str) -> Path:
        """The file to write, or a usage error on ``--output``: it is (or lies inside) one of ``inputs`` ((flag,
        path): the command's), a folder or not a regular file (``what``: the kind of file it names), a file
        already there without ``--overwrite``, or in a folder that does not exist."""
        out = Path(self.output)
        for flag, path in inputs:
            if out.resolve().is_relative_to(Path(path).resolve()):
                raise UsageError("output", f"{out} overlaps inputs: it is (or lies inside) {flag} {path}")
        if out.is_dir():  # --overwrite replaces a file, never a folder (".ev.tmp: Is a directory" before)
            raise UsageError("output", f"{out} is a folder: --output names {what}")
        if out.exists() and not out.is_file():
            raise UsageError("output", f"{out} is not a regular file: --output names {what}")
        if out.exists() and not self.overwrite:
            raise UsageError("output", f"{out} exists; pass --overwrite to replace it")
        if not out.parent.is_dir():
            raise UsageError("output", f"{out}: folder {out.parent} does not exist")
        return out


def output_file(
    output: str | Path | None,
    default: Path,
    *,
    suffixes: Sequence[str],
    ours: Callable[[Path], bool],
    kind: tuple[str, str],
    mine: str,
    error: Callable[[str], Exception],
) -> Path:
    """Where a command with no ``--overwrite`` writes its file (``berttrain plot``'s figure; ``default`` when
    ``--output`` is left out): a file name ending in one of ``suffixes``, never a folder, and a file already there
    only if ``ours`` says the command wrote it (``mine``: what it is then); else ``error`` (the command's kind of
    error) of the words here. ``kind``: the command's nouns, (the file's name, a file of its kind)."""
    name, a_file = kind
    if output is not None and not str(output):  # "" wrote the default file without a word
        raise error(f"--output '' names no file: give {name}, or leave --output out")
    out = Path(output) if output is not None else default
    if out.is_dir():
        raise error(f"--output {out} is a folder: give {name} (such as {out / default.name})")
    if out.suffix.lower() not in suffixes:
        raise error(f"--output {out}: name {a_file} ending in {', '.join(suffixes)}")
    if (out.exists() or out.is_symlink()) and not ours(out):
        raise error(
            f"--output {out} already exists and is no {mine}: choose another --output, or remove the file yourself"
        )
    return out


def dangling_link(path: str | os.PathLike[str]) -> str | None:
    """Words for an output path that is a symbolic link to nothing (a loop, a missing target), else None: making
    the folder there fails with 'File exists' or 'Not a directory', which named neither."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"{os.fspath(path)} is a link that leads to no folder (a loop, or a missing target)"
    return None


def check_owned(
    folder: Path,
    owns: Callable[[str], bool],
    *,
    overwrite: bool | None,
    what: str,
    param: str = "output",
    marker: str | None = None,
    legacy: bool = False,
) -> None:
    """Raise ``UsageError(param, ...)`` unless ``folder`` is new, empty, or holds only files ``owns`` names
    that may be replaced: marked with ``marker`` (or ``legacy``: an earlier run from before the marker), or
    ``overwrite`` (None: the command has no such flag)."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(param, f"{folder} is a file, not a folder")
    if dangling_link(folder):
        raise UsageError(param, dangling_link(folder) or "")
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    mine = [n for n in names if n != marker]
    foreign = [n for n in mine if not owns(n)]
    if foreign:
        raise UsageError(
            param,
            f"{folder} holds files that are not {what} ({_listing(foreign)}): write it into a new or empty folder",
        )
    if not mine or (marker is not None and marker in names) or legacy or overwrite:
        return
    hint = "pass --overwrite to replace them, or choose" if overwrite is not None else "remove them, or choose"
    raise UsageError(
        param, f"{folder} already holds {_listing(mine)}, which {what} would replace: {hint} another folder"
    )


def publish(folder: Path, write: Callable[[Path], Iterable[str] | None], *, marker: str | None = None) -> None:
    """Run ``write(tmp)`` on a temporary sibling folder, then move what it wrote into ``folder`` (made if need
    be; files of the same names replaced, ``marker`` written last). On failure the temporary folder goes and
    ``folder`` is as it was."""
    folder = folder.absolute()
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(folder)
    tmp = folder.parent / f"{_tmp_prefix(folder)}{os.getpid()}-{uuid.uuid4().hex[:6]}-{_host()}"
    tmp.mkdir()
    try:
        write(tmp)
        if marker is not None:
            (tmp / marker).write_text("written by bertstream; the folder is replaced whole by the next run\n")
        if not folder.exists():
            os.rename(tmp, folder)
            return
        for p in sorted(tmp.iterdir(), key=lambda p: p.name == marker):
            os.replace(p, folder / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale(folder: Path) -> list[Path]:
    """Remove the temporary folders that :func:`publish` runs on this host left beside ``folder`` when they were
    killed (no ``finally`` ran): hidden, they held a whole export's size out of sight. One of a process still
    running (a run writing now), or of another host sharing the file system, is left alone. Returns them."""
    prefix, removed = _tmp_prefix(folder), []
    for p in folder.parent.iterdir() if folder.parent.is_dir() else ():
        if not p.name.startswith(prefix) or p.is_symlink() or not p.is_dir():
            continue
        pid, _, rest = p.name[len(prefix) :].partition("-")
        if pid.isdigit() and rest.partition("-")[2] == _host() and not pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _tmp_prefix(folder: Path) -> str:
    return f".{folder.name}.tmp-"


def _host() -> str:
    return socket.gethostname().replace("/", "_") or "host"


def _listing(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
