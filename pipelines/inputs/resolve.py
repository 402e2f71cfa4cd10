"""Input resolution, shared by every job (pretraining, vocabulary, extract, tasks): ``--input`` paths and globs on
any Beam filesystem -> sorted ``InputFile``s with their sizes, formats and corpus-relative names.

An input is its content, read once, as it was listed:
- a path that exists is that file, even when it looks like a glob (``part[1].txt``): the literal path wins;
- local paths are compared by the file they reach (device and inode), so a link beside its target, a hard link
  (or a folder reached twice through links) is one input, read once, and the run says so;
- a recursive ``**`` walks each folder once, whatever links loop back to it;
- each file's size and modification time are kept from the listing: readers fail the run, naming the file,
  when it changed before they were done (``bertstream.pipelines.common.files.check_unchanged``).
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import absolute, missing_filesystem_in
from bertstream.pipelines.inputs.formats import FIELD_FORMATS, FORMATS
from bertstream.pipelines.inputs.options import AUTO, TEXT_FIELD
from bertstream.schemas.whole_file import file_kind


@dataclass(frozen=True, slots=True)
class InputFile:
    path: str
    bytes: int
    format: str
    name: str = ""  # the path below the common folder of all inputs: what document ids are made of
    mtime: float = 0.0  # as listed (0: unknown); readers check it did not change
    source: str = ""  # the --input that listed it (the first, sorted, where several did): the report's source


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


_PREFIX = re.compile(r"([A-Za-z][\w-]+):(?!//)")  # a word before a colon that does not start a URL's //


def split_format(pattern: str, default_format: str, formats: tuple[str, ...] = FORMATS) -> tuple[str, str]:
    """``"text:books/*.txt"`` -> ``("text", "books/*.txt")``; no known prefix -> the default format."""
    head, sep, rest = pattern.partition(":")
    if sep and head in formats:
        return head, rest
    return default_format, pattern


def unknown_prefix(pattern: str, formats: tuple[str, ...] = FORMATS) -> str | None:
    """The format-like prefix of ``pattern`` that is no format (``parquet`` of ``parquet:x`` before it was one),
    else None; a URL's scheme (``gs://``) is no prefix."""
    m = _PREFIX.match(pattern)
    return m.group(1) if m and m.group(1) not in formats else None


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``glob``'s syntax as a regular expression over whole paths: ``**`` any folders (a whole component),
    ``*`` and ``?`` within a name, ``[...]`` a character class; as in ``glob``, a wildcard at the start of a
    name does not match a leading dot."""
    out = []
    for k, part in enumerate(pattern.split("/")):
        last = k == pattern.count("/")
        if part == "**":
            out.append(r"(?:(?!\.)[^/]+(?:/(?!\.)[^/]+)*)?" if last else r"(?:(?!\.)[^/]+/)*")
            continue
        piece = "(?!\\.)" if part[:1] in ("*", "?", "[") else ""
        i = 0
        while i < len(part):
            c = part[i]
            j = part.find("]", i + 2) if c == "[" else -1
            if c == "*":
                piece += "[^/]*"
            elif c == "?":
                piece += "[^/]"
            elif j > 0:
                body = part[i + 1 : j]
                piece += "[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]"
                i = j
            else:
                piece += re.escape(c)
            i += 1
        out.append(piece if last else piece + "/")
    return re.compile("".join(out) + r"\Z")


def _walk_once(pattern: str) -> tuple[list[str], int]:
    """The files matching a recursive pattern, each folder walked once (links followed, loops cut); and how
    many folders were reached again through a link and not walked twice."""
    parts = pattern.split("/")
    fixed = next(i for i, p in enumerate(parts) if glob.has_magic(p))
    if parts[fixed] != "**":  # a wildcard folder before the **: walk each folder it matches
        rest = "/".join(parts[fixed + 1 :])
        found, again = [], 0
        for root in sorted(glob.glob("/".join(parts[: fixed + 1]))):
            if os.path.isdir(root):
                f, a = _walk_once(f"{glob.escape(root)}/{rest}")
                found += f
                again += a
            elif not rest:
                found.append(root)
        return found, again
    regex = _glob_regex(pattern)
    seen: set[tuple[int, int]] = set()
    found, again = [], 0
    for root in ["/".join(parts[:fixed]) or "/"]:
        for folder, dirs, names in _walk(root):
            try:
                st = os.stat(folder)  # the folder's identity, whatever links lead to it (realpath costs its depth)
            except OSError:
                continue
            real = (st.st_dev, st.st_ino)
            if real in seen:
                again += 1
                dirs[:] = []
                continue
            seen.add(real)
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for n in names:
                path = os.path.join(folder, n)
                if regex.match(path):
                    found.append(path)
    return sorted(found), again


def _walk(root: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root, followlinks=True)``, top-down, with a stack instead of recursion: Python 3.11's recursed
    once per level, and a folder 1,500 levels deep ended the listing with "maximum recursion depth exceeded".
    As there, ``dirs`` may be pruned in place and unreadable folders are skipped."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        dirs: list[str] = []
        names: list[str] = []
        for e in entries:
            try:
                is_dir = e.is_dir()  # follows links, as followlinks=True
            except OSError:
                is_dir = False
            (dirs if is_dir else names).append(e.name)
        yield folder, dirs, names
        stack.extend(os.path.join(folder, d) for d in reversed(dirs))


@dataclass(frozen=True, slots=True)
class Match:
    """What one ``--input`` pattern lists: its regular files, and the folder walks a link loop cut short."""

    files: list[FileMetadata]
    loops_cut: int = 0


def match_pattern(pattern: str) -> list[FileMetadata]:
    """Files matching a path or glob (see :func:`match_input`)."""
    return match_input(pattern).files


def match_input(pattern: str) -> Match:
    """Files matching a path or glob. Local patterns are made absolute; a path that exists is taken literally
    (``part[1].txt``); ``*``, ``?`` and ``[...]`` are matched by Python's ``glob`` and a recursive ``**`` by a
    walk that follows links into folders once each (Beam's local match finds nothing for a relative pattern
    with a wildcard in a folder, ``corpus*/wiki/*``, and does not descend into linked folders)."""
    if "://" in pattern:
        return Match([m for m in FileSystems.match([pattern])[0].metadata_list if not m.path.endswith("/")])
    pattern = absolute(os.path.expanduser(pattern))
    loops = 0
    if os.path.lexists(pattern) or not glob.has_magic(pattern):
        paths = [pattern]
    elif "**" in pattern:
        paths, loops = _walk_once(pattern)
    else:
        paths = sorted(glob.glob(pattern))
    files = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            files.append(FileMetadata(p, st.st_size, st.st_mtime))
    return Match(files, loops)


def _nothing_matched(raw: str, fmt: str, pattern: str) -> str:
    """Why ``pattern`` (``raw`` as typed) lists no file, in the user's terms."""
    if "://" in pattern:
        return f"{pattern!r} matches no files"
    path = absolute(os.path.expanduser(pattern))
    if raw != pattern and os.path.lexists(absolute(os.path.expanduser(raw))):
        return (
            f"{pattern!r} matches no files ({fmt + ':'!r} was read as a format prefix; "
            f"to read the file {raw!r} write ./{raw})"
        )
    if os.path.lexists(path):
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            return f"{pattern!r} cannot be read: {e.strerror or e} (a broken link?)"
        what = file_kind(mode)
        if stat.S_ISDIR(mode):
            return f"{pattern!r} is a folder, not a file: use {pattern.rstrip('/')}/* (or /**/* for its subfolders)"
        return f"{pattern!r} is {what}, not a regular file: give a file (or a glob of files)"
    if glob.has_magic(pattern):
        matched = glob.glob(path) if "**" not in pattern else []
        if matched:
            return f"{pattern!r} matches {len(matched)} entries, none a regular file (e.g. {matched[0]})"
    return f"{pattern!r} matches no files"


def _folder_files(fmt: str, pattern: str) -> list[str] | None:
    """The files of a local folder given as an input, for a format that reads folders: the Arrow files of a
    ``datasets`` ``save_to_disk`` folder (``arrow:``, or without a format when it holds ``state.json``)."""
    path = absolute(os.path.expanduser(pattern))
    if "://" in pattern or not os.path.isdir(path):
        return None
    if fmt == "arrow" or (fmt not in FORMATS and os.path.isfile(os.path.join(path, "state.json"))):
        from bertstream.pipelines.inputs.columnar import datasets_folder_files

        return datasets_folder_files(path)
    return None


def resolve_inputs(
    patterns: list[str], default_format: str = "sentences", formats: tuple[str, ...] = FORMATS
) -> list[InputFile]:
    """Expand paths and globs on any Beam filesystem; a pattern that matches nothing is an error.

    A pattern may carry its own format (``wikiextractor:wiki/*``), so books and Wikipedia can share one
    run and one random-next pool, as in BERT's own pretraining data; a prefix that names no format (and no
    file) is an error that names ``formats``. Local files reached by two paths (links) are one input, listed
    under the path that is not a link (else the first, sorted). A ``save_to_disk`` folder stands for its
    Arrow files (``arrow:`` or no prefix). ``default_format`` may be one that is no format (``auto``): the
    caller then decides each file's (``InputFile.format``).
    """
    if not patterns:
        raise UsageError("input", "no --input given")
    listed: list[tuple[FileMetadata, str, str]] = []  # (file, format, the --input that listed it)
    loops = 0
    for raw in patterns:
        fmt, pattern = split_format(raw, default_format, formats)
        folder = _folder_files(fmt, pattern)
        if folder is not None:
            fmt = "arrow"
            for p in folder:
                files = match_input(p).files
                if not files:
                    raise UsageError("input", f"{p} (a file of the folder {pattern}) is missing")
                listed += [(m, fmt, raw) for m in files]
            continue
        try:
            matched = match_input(pattern)
        except Exception as e:
            missing = missing_filesystem_in(e)
            raise UsageError("input", f"cannot list {pattern!r}: {missing or e}") from None
        prefix = unknown_prefix(raw, formats)
        if not matched.files and prefix is not None:
            raise UsageError("input", f"{raw!r}: unknown input format {prefix!r} (the formats: {', '.join(formats)})")
        if not matched.files:
            raise UsageError("input", _nothing_matched(raw, fmt, pattern))
        if fmt == AUTO:
            fmt = _detected(pattern, sorted(m.path for m in matched.files))
        loops += matched.loops_cut
        listed += [(m, fmt, raw) for m in matched.files]
    # One path per local file: the one without a link in it (a path that is its own real path), else the first.
    # A file is its device and inode: a hard link (another name of the same file, no link in its path) was
    # read twice, its documents twice in the dataset.
    real = {m.path: m.path if "://" in m.path else _identity(m.path) for m, _, _ in listed}
    chosen: dict[str, str] = {}
    for p in sorted({m.path for m, _, _ in listed}, key=lambda p: ("://" not in p and os.path.realpath(p) != p, p)):
        chosen.setdefault(real[p], p)
    again = sorted({f"{m.path} (= {chosen[real[m.path]]})" for m, _, _ in listed if chosen[real[m.path]] != m.path})
    found: dict[str, tuple[int, str, float]] = {}
    given: dict[str, str] = {}
    for m, fmt, raw in sorted(listed, key=lambda x: x[2]):
        path = chosen[real[m.path]]
        if path in found and found[path][1] != fmt:
            raise UsageError("input", f"{path} is given as both {found[path][1]} and {fmt}")
        found[path] = (m.size_in_bytes, fmt, m.last_updated_in_seconds)
        given.setdefault(path, raw)
    if again or loops:
        from bertstream.pipelines.common import counters as C

        if again:
            shown = ", ".join(again[:3]) + (f" and {len(again) - 3} more" if len(again) > 3 else "")
            C.progress(f"{len(again)} input paths lead to files already listed (links), each read once: {shown}")
        if loops:
            C.progress(f"{loops} folders reached again through links were walked once")
    # Sorted: the order of --input arguments must not matter.
    paths = sorted(found)
    return [
        InputFile(p, found[p][0], found[p][1], name=n, mtime=found[p][2], source=given[p])
        for p, n in zip(paths, relative_names(paths))
    ]


def _identity(path: str) -> str:
    """A local file's identity, whatever names it has: its device and inode (else its real path)."""
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return f"inode {st.st_dev}:{st.st_ino}"


def _detected(pattern: str, paths: list[str]) -> str:
    """``--format auto``: the layout of one input's files, said in one line with its evidence."""
    from bertstream.pipelines.common import counters as C
    from bertstream.pipelines.inputs.detect import detect_files

    found = detect_files(pattern, paths)
    C.progress(f"--format auto: {pattern} read as {found.format} ({found.why}); --format chooses another")
    return found.format


def input_format_of(files: list[InputFile]) -> str | dict[str, str]:
    """The runs's input format: one name, or each input's own (``{"books/a.txt": "text", ...}``) when they mix."""
    formats = {f.format for f in files}
    if len(formats) == 1:
        return formats.pop()
    return {f.name or f.path: f.format for f in files}


def check_text_field(files: list[InputFile], text_field: str) -> None:
    """``--text-field`` names a field of JSON lines, Parquet or Arrow inputs: given with none of them, it would
    do nothing (every argument is used or refused)."""
    if text_field != TEXT_FIELD and not any(f.format in FIELD_FORMATS for f in files):
        formats = ", ".join(sorted({f.format for f in files}))
        raise UsageError(
            "text_field", f"{text_field!r} applies to {', '.join(FIELD_FORMATS)} inputs; these are {formats}"
        )


def describe_inputs(files: list[InputFile], shown: int = 3) -> str:
    """``a.txt, b.txt and 4 more``: how an error names the inputs."""
    names = ", ".join(f.path for f in files[:shown])
    return names + (f" and {len(files) - shown} more" if len(files) > shown else "")
