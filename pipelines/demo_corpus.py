"""A real corpus that every Python installation carries: the reference documentation in ``pydoc_data``.

About 0.5 MB of English prose (79 topics of the language reference, hard-wrapped paragraphs separated by
blank lines), written one file per topic in the pipeline's ``text`` format. The README's main job and the
tests use it, so both run on a fresh machine with no download.
"""

from __future__ import annotations

from pathlib import Path

from bertstream.cli.errors import UsageError
from bertstream.cli.owned import dangling_link

HELDOUT = "heldout"


def write_pydoc_corpus(directory: str | Path, holdout_every: int = 0) -> list[Path]:
    """One ``<topic>.txt`` per topic; with ``holdout_every=k``, every k-th topic goes to ``heldout/`` instead
    (an evaluation split of whole documents).

    The folder must be new, empty or this command's own: a folder of other files is refused (``UsageError`` on
    ``directory``), and a topic written by an earlier run to the other split is removed, so that a second run
    with another ``holdout_every`` never leaves a document in both splits."""
    from pydoc_data.topics import topics

    if holdout_every < 0 or holdout_every == 1:
        raise UsageError(
            "holdout_every", f"must be 0 (none) or at least 2 (every k-th document held out), got {holdout_every}"
        )
    out = Path(directory)
    if dangling_link(out):
        raise UsageError("directory", dangling_link(out) or "")
    names = {f"{name}.txt" for name in topics}
    foreign = _foreign(out, names)
    if foreign:
        raise UsageError(
            "directory",
            f"{out} holds files demo-corpus does not write ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}): give a new or empty folder",
        )
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, name in enumerate(sorted(topics)):
        held = bool(holdout_every) and i % holdout_every == holdout_every - 1
        folder, other = (out / HELDOUT, out) if held else (out, out / HELDOUT)
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.txt"
        path.write_text(topics[name], encoding="utf-8")
        (other / path.name).unlink(missing_ok=True)
        paths.append(path)
    if not holdout_every and (out / HELDOUT).is_dir():
        (out / HELDOUT).rmdir()  # an earlier run's split, emptied above
    return paths


def _foreign(out: Path, names: set[str]) -> list[str]:
    """What ``out`` holds that a run of this command did not write (links too: writing would follow them)."""
    if not out.is_dir():
        return []
    found = []
    for p in sorted(out.iterdir()):
        if p.name == HELDOUT and p.is_dir() and not p.is_symlink():
            found += [f"{HELDOUT}/{q.name}" for q in sorted(p.iterdir()) if not _ours(q, names)]
        elif not _ours(p, names):
            found.append(p.name)
    return found


def _ours(p: Path, names: set[str]) -> bool:
    return p.name in names and p.is_file() and not p.is_symlink()
