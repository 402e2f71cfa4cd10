"""Names every job's configuration and the shared readers and writers agree on: the text input formats,
the shard output formats and the Arrow compressions."""

from __future__ import annotations

FORMATS = ("sentences", "wikiextractor", "text", "jsonl", "lines")  # pretraining and vocabulary inputs
AUTO = "auto"  # --format auto: one of FORMATS per --input, judged from its content (common/format_detect.py)
FORMAT_CHOICES = (AUTO, *FORMATS)
OUTPUT_FORMATS = ("arrow", "webdataset", "both")
ARROW_COMPRESSIONS = ("zstd", "lz4", "none")
