"""``arrow``: an Arrow IPC stream (what ``datasets.Dataset.save_to_disk`` writes) or file; a ``save_to_disk``
folder stands for its Arrow files (:func:`bertstream.pipelines.inputs.columnar.datasets_folder_files`). One
document per row, id ``name:row``, as ``parquet``; record batches are the units a file is split in."""

from __future__ import annotations

from bertstream.pipelines.inputs.columnar import Table
from bertstream.pipelines.inputs.detect import Sample


def detect(sample: Sample) -> str | None:
    if sample.head.startswith(b"ARROW1"):
        return "an Arrow IPC file's magic bytes"
    if sample.head.startswith(b"\xff\xff\xff\xff"):
        return "an Arrow IPC stream's first message"
    return None


_TABLE = Table("arrow")
ranges, read = _TABLE.ranges, _TABLE.read
