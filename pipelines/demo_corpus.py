"""A real corpus that every Python installation carries: the reference documentation in ``pydoc_data``.

About 0.5 MB of English prose (79 topics of the language reference, hard-wrapped paragraphs separated by
blank lines), written one file per topic in the pipeline's ``text`` format. The README's main job and the
tests use it, so both run on a fresh machine with no download.
"""

from __future__ import annotations

from pathlib import Path


def write_pydoc_corpus(directory: str | Path, holdout_every: int = 0) -> list[Path]:
    """One ``<topic>.txt`` per topic; with ``holdout_every=k``, every k-th topic goes to ``heldout/`` instead
    (an evaluation split of whole documents)."""
    from pydoc_data.topics import topics

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, name in enumerate(sorted(topics)):
        folder = out / "heldout" if holdout_every and i % holdout_every == holdout_every - 1 else out
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.txt"
        path.write_text(topics[name], encoding="utf-8")
        paths.append(path)
    return paths
