"""``parquet``: one document per row, id ``name:row``; the text column (``--text-field``) split into paragraphs
at its newlines, ``id`` and ``title`` columns kept where present, a null text a counted drop. Row groups are the
units a file is split in (:mod:`bertstream.pipelines.inputs.columnar` reads them)."""

from __future__ import annotations

from bertstream.pipelines.inputs.columnar import Table
from bertstream.pipelines.inputs.detect import Sample


def detect(sample: Sample) -> str | None:
    return "Parquet's magic bytes" if sample.head.startswith(b"PAR1") else None


_TABLE = Table("parquet")
ranges, read = _TABLE.ranges, _TABLE.read
