"""The ``--output`` policy of every ``bertprep`` command that writes a folder (pretraining, task, vocab).

Outputs are owned: a folder a command writes into is empty, or holds that command's own earlier run (replaced
only with ``--overwrite``), or is refused, whatever ``--overwrite`` says. A folder with a ``manifest.json``
holds a dataset; shard or temporary files without one are the leftovers of a run that was killed, and are
called that. Nothing the run reads (inputs, vocabulary, ``--label-set-from``) may lie inside it.

One run per folder at a time: ``OUTPUT/.bertprep.lock``, taken with ``bertstream.cli.lock`` (which berttrain's
run folder shares): hard-linked into place, a stale lock (its process gone) taken over and said so; runs into a
URL are not locked.

A run's work files (spill, pools, the earlier run set aside) live in ``OUTPUT/_work/RUN_ID``; ``_work`` is
emptied of a killed run's leftovers when the lock is taken, and removed at the end of the run. After a failure
that removal is bounded (:data:`CLEANUP_SECONDS`), so that an object store that has gone away cannot hide or
delay the run's own error. :func:`claim_output` does all of it, in that order, around a command's writing.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.cli.lock import FolderLock, lock_folder
from bertstream.cli.owned import dangling_link
from bertstream.cli.watch import watched
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import literal
from bertstream.pipelines.common.files import absolute
from bertstream.pipelines.common.output_place import (
    LOCK_NAME,
    check_no_overlap,
    check_not_inside_a_dataset,
    manifest_kind,
)
from bertstream.pipelines.common.spill import remove_work_dir
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.vocab import VOCAB_FILENAME

WORK_DIR_NAME = "_work"
# Beside a command's own files, a folder may hold these without being someone else's: the run's work folder
# and `bertprep report`'s default output (dotfiles, the lock among them, are never counted).
OWN_EXTRAS = (WORK_DIR_NAME, "report")
# Cleaning up after a failed run must not hide or delay its error: on an object store that has gone away,
# Beam's S3/GCS clients retry each list and delete with exponential backoff for about ten minutes.
CLEANUP_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class OutputPolicy:
    """What one command writes into its ``--output``: ``is_output`` says which names are its files (or a
    killed run's temporary ones); ``kinds``, the manifest kinds it may replace; ``what`` names them in
    messages ("a pretraining dataset's"); ``command`` names the run in the lock."""

    command: str
    is_output: Callable[[str], bool]
    kinds: tuple[str, ...] = ()
    what: str = "a dataset's"
    dataset: bool = True  # a dataset folder (a manifest, a vocabulary beside it); False: bertprep vocab's
    # the dataset holds its vocabulary (vocab.txt); False: bertprep extract's documents, which hold none, so a
    # vocab.txt there is someone's (its --overwrite deleted a lone one)
    with_vocab: bool = True


@dataclass(frozen=True, slots=True)
class Claim:
    """An output folder held by one run: its absolute path, the run's id and work folder."""

    output_dir: str
    run_id: str
    work_dir: str


@contextmanager
def claim_output(output: str, overwrite: bool, policy: OutputPolicy, reads: dict[str, list[str]]) -> Iterator[Claim]:
    """Hold ``output`` for one run: absolute (workers of a distributed runner resolve a relative path against
    their own folder), not overlapping what the run ``reads`` (flag -> paths), writable, locked, holding
    nothing that is not the command's (and nothing of it without ``overwrite``), a fresh work folder, the
    earlier run's files set aside there. When the block fails, the earlier run comes back and the work folder
    goes within :data:`CLEANUP_SECONDS`; when it succeeds, the work folder goes with the earlier run in it."""
    if not output.strip():
        raise UsageError("output", "is empty: name a folder")
    output_dir = absolute(output.rstrip("/") or "/")  # ("/" is the root, not "": the current folder)
    check_no_overlap(output_dir, reads)
    check_not_inside_a_dataset(output_dir)
    made = ensure_writable_dir(output_dir)
    try:
        with _claimed(output_dir, overwrite, policy) as claim:
            yield claim
    except BaseException:
        if made is not None:
            remove_empty_made(output_dir, made)  # a refused or failed run leaves no empty --output behind
        raise


@contextmanager
def _claimed(output_dir: str, overwrite: bool, policy: OutputPolicy) -> Iterator[Claim]:
    run_id = new_run_id()
    with lock_output(output_dir, run_id, policy.command) as lock:
        check_work_dir(output_dir)
        put_back_set_aside(output_dir, policy.is_output)
        replaced = check_output(output_dir, overwrite, policy)
        work_dir = prepare_work_dir(output_dir, run_id)
        root = FileSystems.join(output_dir, WORK_DIR_NAME)
        previous = FileSystems.join(work_dir, "previous")
        # A death no handler sees (an abort in native code, SIGKILL): one line, and no lock left (cli/watch.py).
        with watched(lock.path, run_id, work_dir, previous, policy.command, output_dir):
            try:
                with replacing(output_dir, policy.is_output, replaced, previous):
                    yield Claim(output_dir, run_id, work_dir)
            except BaseException:
                remove_work_dir_within(root)  # spill and pool files of a failed run; nothing was published
                raise
            remove_work_dir(root)


def new_run_id() -> str:
    """``20260101T120000-4242-1a2b3c``: unique per run, sortable by start; names the run's work files."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


RUN_ID = re.compile(r"\d{8}T\d{6}-\d+-[0-9a-f]{6}\Z")  # what new_run_id makes: a run's folder in _work


# --------------------------------------------------------------------------------------- the folder itself


def ensure_writable_dir(output_dir: str) -> str | None:
    """Create a local ``--output`` folder if needed and prove it writable; the topmost folder this made (None:
    it was there). URLs are checked by the run itself (object stores have no folders and no permissions to
    read up front)."""
    if "://" in output_dir:
        return None
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UsageError("output", f"{output_dir} is a file; --output must be a folder")
    if dangling_link(output_dir):
        raise UsageError("output", dangling_link(output_dir) or "")
    made = output_dir
    while not os.path.exists(os.path.dirname(made)) and os.path.dirname(made) != made:
        made = os.path.dirname(made)
    made_any = not os.path.exists(output_dir)
    probe = os.path.join(output_dir, f".bertprep-write-test-{uuid.uuid4().hex}")
    try:
        os.makedirs(output_dir, exist_ok=True)
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        raise UsageError("output", f"cannot write to {output_dir}: {e.strerror or e}") from None
    return made if made_any else None


def remove_empty_made(output_dir: str, made: str) -> None:
    """Remove ``output_dir`` and the folders above it up to ``made`` (what :func:`ensure_writable_dir` created),
    each only while empty: whatever another process put there meanwhile stays."""
    path = output_dir
    while True:
        try:
            os.rmdir(path)
        except OSError:  # not empty (or gone): leave it, and every folder above it
            return
        if path == made or os.path.dirname(path) == path:
            return
        path = os.path.dirname(path)


def _names_in(output_dir: str) -> list[str]:
    """Every name directly in ``output_dir`` (files and folders; on object stores, the objects below it)."""
    if "://" not in output_dir:
        return sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
    prefix = output_dir.rstrip("/") + "/"
    names = {p[len(prefix) :].split("/", 1)[0] if p.startswith(prefix) else p for p in literal.files_below(output_dir)}
    return sorted(n for n in names if n)


def existing_outputs(output_dir: str, is_output: Callable[[str], bool]) -> list[str]:
    """The paths directly in ``output_dir`` whose name ``is_output`` says is the command's, sorted."""
    return [FileSystems.join(output_dir, n) for n in _names_in(output_dir) if is_output(n)]


def check_output(output_dir: str, overwrite: bool, policy: OutputPolicy) -> list[str]:
    """Refuse to mix runs: a folder holding anything but this command's files (a dataset of another kind than
    ``policy.kinds``) is refused, with or without ``overwrite``; one holding this command's files (for a
    dataset, a vocabulary alone does not count) needs ``overwrite``. Returns the files the run replaces, the
    manifest first. Changes nothing; call it holding the lock."""
    kind = manifest_kind(output_dir) if policy.dataset else None
    if policy.kinds and kind is not None and kind not in policy.kinds:
        raise UsageError(
            "output",
            f"{output_dir} holds a {kind} dataset, which this command does not write: choose another --output",
        )
    names = _names_in(output_dir)
    own = policy.is_output
    if policy.dataset and policy.with_vocab:
        own = lambda name: policy.is_output(name) or name == VOCAB_FILENAME  # noqa: E731 - such a dataset has one
    foreign = sorted(n for n in names if not n.startswith(".") and n not in OWN_EXTRAS and not own(n))
    foreign += _foreign_below(output_dir, [n for n in names if own(n)], own)
    if foreign:
        raise UsageError(
            "output",
            f"{output_dir} holds files that are not {policy.what} ({_first_three(foreign)}); bertprep "
            "writes into an empty folder or over its own earlier run only: choose another --output",
        )
    existing = [FileSystems.join(output_dir, n) for n in names if own(n)]
    if existing and not overwrite:  # a vocab.txt alone too: someone's, replaced only when --overwrite says so
        raise UsageError("output", _refusal(output_dir, existing, policy.dataset))
    manifest = FileSystems.join(output_dir, MANIFEST_NAME)
    return sorted(existing, key=lambda p: p != manifest)  # the manifest first: no manifest, no dataset


def _first_three(names: list[str]) -> str:
    """``a, b, c and 4 more``: what a refusal names of the files in its way."""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"{', '.join(names[:3])}{more}"


def _foreign_below(output_dir: str, folders: list[str], own: Callable[[str], bool]) -> list[str]:
    """What the command's own folders (a dataset's ``eval/``) hold that is not the command's: a user's
    ``eval/notes.txt`` is theirs, not a killed run's leftover, and no ``--overwrite`` removes it."""
    found = []
    for name in folders:
        path = FileSystems.join(output_dir, name)
        if "://" not in path and not (os.path.isdir(path) and not os.path.islink(path)):
            continue
        prefix = path.rstrip("/") + "/"
        inner = {p[len(prefix) :].split("/", 1)[0] for p in literal.files_below(path) if p.startswith(prefix)}
        found += [f"{name}/{n}" for n in sorted(inner) if n and not own(n)]
    return found


def _refusal(output_dir: str, existing: list[str], dataset: bool) -> str:
    """Why ``existing`` files stop a run without ``--overwrite``: a finished dataset, a vocabulary, or leftovers."""
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in existing]
    if not dataset:
        return f"{output_dir} already holds a vocabulary ({', '.join(names)}); pass --overwrite to replace it"
    if MANIFEST_NAME in names:
        return (
            f"{output_dir} already holds a dataset ({MANIFEST_NAME} and {len(existing) - 1} other files); "
            "pass --overwrite to replace it"
        )
    if names == [VOCAB_FILENAME]:
        return f"{output_dir} already holds a {VOCAB_FILENAME} (and no dataset); pass --overwrite to replace it"
    files = f"{len(existing)} file" + ("s such as " if len(existing) > 1 else ": ")
    return (
        f"{output_dir} holds leftovers of an unfinished run (no {MANIFEST_NAME}; {files}{names[0]}); "
        "pass --overwrite to remove them"
    )


@contextmanager
def replacing(output_dir: str, is_output: Callable[[str], bool], paths: list[str], aside_dir: str) -> Iterator[None]:
    """Run the block with the earlier run's files (``paths``, from :func:`check_output`) set aside in
    ``aside_dir``, manifest first; if the block fails, its own files go and the earlier run comes back (its
    manifest last), so that ``--overwrite`` loses nothing to a run that fails, even one that fails late
    (a corrupt file found while reading). On success the caller removes ``aside_dir`` with its work folder."""
    moved: list[tuple[str, str]] = []
    if paths and "://" not in aside_dir:
        os.makedirs(aside_dir, exist_ok=True)
    try:
        for p in paths:
            dst = FileSystems.join(aside_dir, p.rstrip("/").rsplit("/", 1)[-1])
            move(p, dst)
            moved.append((p, dst))
        yield
    except BaseException:
        _restore(output_dir, is_output, moved, aside_dir)
        raise


def _restore(output_dir: str, is_output: Callable[[str], bool], moved: list[tuple[str, str]], aside: str) -> None:
    if not moved:  # nothing set aside: the run's own partial files go with the run (no listing of a store that
        return  # may have gone away, which Beam's clients would retry for minutes)
    try:
        partial = [o for p in existing_outputs(output_dir, is_output) for o in objects(p)]
        if partial:
            literal.delete(partial)
        for src, dst in sorted(moved, key=lambda m: m[0].endswith(MANIFEST_NAME)):
            move(dst, src)
    except Exception as e:  # noqa: BLE001 - the run's own error is what the user must see
        C.progress(f"could not put the earlier files back ({type(e).__name__}: {e}); they are in {aside}")


def objects(path: str) -> list[str]:
    """``path``, or where it names a folder on an object store (a prefix, no object: a dataset's ``eval``
    folder, say), every object below it: what a rename or a delete there must name one by one."""
    if "://" not in path or FileSystems.exists(path):
        return [path]
    return literal.files_below(path)


def move(src: str, dst: str) -> None:
    """Rename a file or a folder, also on an object store (whose renames take objects, not folders)."""
    sources = objects(src)
    if sources:
        FileSystems.rename(sources, [dst + s[len(src) :] for s in sources])


# ------------------------------------------------------------------------------------------- the work folder


def check_work_dir(output_dir: str) -> None:
    """Refuse an ``OUTPUT/_work`` that no run made (a file, a link, a folder holding anything but runs'
    folders): it is the user's, and clearing it as "a killed run's leftovers" would delete it, whatever
    ``--overwrite`` says."""
    root = FileSystems.join(output_dir, WORK_DIR_NAME)
    if "://" not in root:
        if not os.path.lexists(root):
            return
        if os.path.islink(root) or not os.path.isdir(root):
            foreign = [WORK_DIR_NAME]
        else:
            foreign = [f"{WORK_DIR_NAME}/{n}" for n in sorted(os.listdir(root)) if not _run_folder(root, n)]
    else:
        prefix = root.rstrip("/") + "/"
        inner = {p[len(prefix) :].split("/", 1) for p in literal.files_below(root) if p.startswith(prefix)}
        foreign = [f"{WORK_DIR_NAME}/{n[0]}" for n in sorted(inner) if len(n) < 2 or not RUN_ID.match(n[0])]
    if foreign:
        raise UsageError(
            "output",
            f"{output_dir} holds {_first_three(foreign)}, which no bertprep run made ({WORK_DIR_NAME} is "
            "the name of bertprep's work folder, emptied by every run): move it, or choose another --output",
        )


def _run_folder(root: str, name: str) -> bool:
    path = os.path.join(root, name)
    return bool(RUN_ID.match(name)) and os.path.isdir(path) and not os.path.islink(path)


RESTORING = ".restoring"  # in a killed run's folder: its partial files are gone, the earlier run is going back


def put_back_set_aside(output_dir: str, is_output: Callable[[str], bool]) -> None:
    """Put back an earlier dataset that a run killed during ``--overwrite`` (SIGKILL, the OOM killer, a lost
    terminal) had set aside in ``_work/RUN/previous``, the killed run's partial files removed first; said in
    one line. Without it the next run, taking over the stale lock, emptied ``_work`` and the earlier dataset
    with it. A run that had published its manifest had finished (it removes its work folder next): nothing
    goes back. Safe to repeat when killed itself: the marker :data:`RESTORING` says the partial files are
    gone, and the earlier manifest goes back last. Call it holding the lock."""
    root = FileSystems.join(output_dir, WORK_DIR_NAME)
    for aside in _set_aside(root):
        run = aside.rstrip("/").split("/")[-2]
        if FileSystems.exists(FileSystems.join(output_dir, MANIFEST_NAME)):
            return  # the killed run's dataset stands
        marker = FileSystems.join(aside.rstrip("/").rsplit("/", 1)[0], RESTORING)
        if not FileSystems.exists(marker):
            partial = [o for p in existing_outputs(output_dir, is_output) for o in objects(p)]
            literal.delete(partial)
            with FileSystems.create(marker) as f:
                f.write(b"partial files removed; the earlier run is going back\n")
        names = _names_in(aside)
        for name in sorted(names, key=lambda n: n == MANIFEST_NAME):
            move(FileSystems.join(aside, name), FileSystems.join(output_dir, name))
        C.progress(
            f"put back the earlier dataset that run {run} had set aside in {WORK_DIR_NAME}/ ({len(names)} files; "
            "it was killed during --overwrite)"
        )
        remove_work_dir(FileSystems.join(root, run))


def _set_aside(root: str) -> list[str]:
    """The ``previous`` folders of killed runs in the work folder ``root`` that still hold files, oldest first."""
    if "://" not in root:
        runs = sorted(os.listdir(root)) if os.path.isdir(root) else []
        found = [os.path.join(root, r, "previous") for r in runs]
        return [p for p in found if os.path.isdir(p) and os.listdir(p)]
    prefix = root.rstrip("/") + "/"
    parts = [p[len(prefix) :].split("/") for p in literal.files_below(root) if p.startswith(prefix)]
    return sorted({f"{prefix}{q[0]}/previous" for q in parts if len(q) > 2 and q[1] == "previous"})


def prepare_work_dir(output_dir: str, run_id: str) -> str:
    """This run's work folder, ``OUTPUT/_work/RUN_ID``; ``_work`` is first emptied of a killed run's leftovers
    (the caller holds the folder's lock: no other run is using it)."""
    root = FileSystems.join(output_dir, WORK_DIR_NAME)
    remove_work_dir(root)
    work_dir = FileSystems.join(root, run_id)
    if "://" not in work_dir:  # object stores have no directories
        FileSystems.mkdirs(work_dir)
    return work_dir


def remove_work_dir_within(work_dir: str, seconds: float | None = None) -> bool:
    """``remove_work_dir`` in a daemon thread, waited for at most ``seconds``; a failure or a timeout is
    reported as a leftover, never raised (the caller is already raising the run's own error)."""
    seconds = CLEANUP_SECONDS if seconds is None else seconds
    outcome: dict[str, BaseException | None] = {}

    def target() -> None:
        try:
            remove_work_dir(work_dir)
            outcome["error"] = None
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome["error"] = e

    t = threading.Thread(target=target, name="bertprep-cleanup", daemon=True)
    t.start()
    t.join(seconds)
    if "error" in outcome and outcome["error"] is None:
        return True
    error = outcome.get("error")
    why = f"not done after {seconds:g} s" if "error" not in outcome else f"{type(error).__name__}: {error}"
    C.progress(f"could not remove the work directory {work_dir} ({why}): leftovers of this failed run, safe to delete")
    return False


def lock_output(output_dir: str, run_id: str, command: str) -> FolderLock:
    """Take ``output_dir``'s lock for this run, or raise ``UsageError`` naming the run that holds it."""
    return lock_folder(output_dir, LOCK_NAME, run_id, command, say=C.progress)
