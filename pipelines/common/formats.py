"""Names the shard writers and every job's configuration agree on: the shard output formats and the Arrow
compressions. (The input formats are :mod:`bertstream.pipelines.inputs.formats`'.)"""

from __future__ import annotations

OUTPUT_FORMATS = ("arrow", "webdataset", "both")
ARROW_COMPRESSIONS = ("zstd", "lz4", "none")
