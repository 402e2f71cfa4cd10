"""A real corpus that every Python installation carries: the reference documentation in ``pydoc_data``.

About 0.5 MB of English prose (79 topics of the language reference, hard-wrapped paragraphs separated by
blank lines), written one file per topic in the pipeline's ``text`` format. The README's main job and the
tests use it, so both run on a fresh machine with no download.
"""

from __future__ import annotations

from pathlib import Path


def write_pydoc_corpus(directory: str | Path) -> list[Path]:
    from pydoc_data.topics import topics

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in sorted(topics):
        path = out / f"{name}.txt"
        path.write_text(topics[name], encoding="utf-8")
        paths.append(path)
    return paths
