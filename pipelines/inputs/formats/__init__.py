"""The table of input formats: one module in this folder per format, named as the format is (``--format jsonl``
reads with ``formats/jsonl.py``). Light to import: the command lines list the names before any reader loads.

Any module may claim file endings (``ENDINGS``, e.g. ``(".csv", ".tsv")``): ``--format auto`` reads a file
whose name ends so (before a compressor's ending) in that format, whatever its first bytes; :func:`claimed_by`.

A module of a format of lines (:data:`LINE_FORMATS`) has
- ``detect(sample) -> str | None``: the evidence, in words, that a sample of a file (:class:`~bertstream.pipelines
  .inputs.detect.Sample`) is in this format, else None;
- ``SPLITS`` and ``anchor``: whether a big file is read in byte ranges, and at which lines a range may start
  (:mod:`bertstream.pipelines.inputs.byte_ranges`; ``anchor`` None: at every line);
- ``parse(lines, name, counters, options) -> Iterator[Document]``: the documents of ``(offset, line)`` pairs.

A module of a format of records (:data:`RECORD_FORMATS`: dumps, tables) has ``detect(sample)`` too, then
- ``ranges(path, size, range_bytes, text_field) -> [(start, end, first_row)]``: whole units tiling the file;
- ``read(path, name, counters, text_field, start, end, row) -> Iterator[Document]``: the documents of a range.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# --format's names, in the order --help lists them: formats of lines, then formats of records.
LINE_FORMATS = ("sentences", "wikiextractor", "text", "jsonl", "lines", "csv")
RECORD_FORMATS = ("mediawiki", "parquet", "arrow")
FORMATS = LINE_FORMATS + RECORD_FORMATS
# --format auto asks each format in this order and takes the first that finds its evidence: magic bytes first,
# then markup, then the layouts of plain text (``sentences`` last: it takes whatever is left). A format claimed by
# its name's ending (csv) finds no evidence in a sample.
DETECTION_ORDER = ("parquet", "arrow", "mediawiki", "wikiextractor", "jsonl", "csv", "text", "lines", "sentences")
FIELD_FORMATS = ("jsonl", "parquet", "arrow", "csv")  # the formats whose records have fields: --text-field names one
# The layouts of plain text: before asking them, auto refuses a sample that is none (binary, markup, JSON).
PLAIN_TEXT_FORMATS = ("text", "lines", "sentences")


def format_module(name: str) -> ModuleType:
    """The module that reads format ``name``."""
    if name not in FORMATS:
        raise ValueError(f"unknown input format {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def claimed_by(path: str, compressed_suffixes: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """``(format, ending)`` of the format whose module claims the ending of ``path``'s name (``ENDINGS``; a
    compressor's ending, one of ``compressed_suffixes``, set aside first), else None."""
    name = path.lower()
    if name.endswith(compressed_suffixes):
        name = name.rsplit(".", 1)[0]
    for fmt in DETECTION_ORDER:
        ending = next((e for e in getattr(format_module(fmt), "ENDINGS", ()) if name.endswith(e)), None)
        if ending is not None:
            return fmt, ending
    return None
