"""Names every job's configuration and the shared readers and writers agree on: the text input formats,
the shard output formats and the Arrow compressions."""

from __future__ import annotations

from typing import Any

from bertstream.cli.errors import check
from bertstream.cli.options import opt

# Pretraining, vocabulary and extract inputs: formats of lines, then formats of records (dumps and tables).
LINE_FORMATS = ("sentences", "wikiextractor", "text", "jsonl", "lines")
RECORD_FORMATS = ("mediawiki", "parquet", "arrow")
FORMATS = LINE_FORMATS + RECORD_FORMATS
AUTO = "auto"  # --format auto: one of FORMATS per --input, judged from its content (common/format_detect.py)
FORMAT_CHOICES = (AUTO, *FORMATS)
OUTPUT_FORMATS = ("arrow", "webdataset", "both")
ARROW_COMPRESSIONS = ("zstd", "lz4", "none")

TEXT_FIELD = "text"  # the default --text-field
FIELD_FORMATS = ("jsonl", "parquet", "arrow")  # the formats whose records have fields: --text-field names one
TEXT_FIELD_HELP = "The field (jsonl) or column (parquet, arrow) that holds the text; id and title are kept too."


def text_field_problem(value: str) -> str | None:
    """Why ``value`` cannot name a text field or column (None: it can)."""
    if not value or value != value.strip():
        return f"must be a field or column name, got {value!r}"
    return None


def input_format_opt(default: str) -> Any:
    """The ``--format`` field of each job that reads text (pretraining, vocab, extract)."""
    return opt(
        default,
        "Input layout; auto: judged from each input's first bytes.",
        flag="--format",
        choices=FORMAT_CHOICES,
        show=True,
    )


def text_field_opt() -> Any:
    """The ``--text-field`` field beside it."""
    return opt(TEXT_FIELD, TEXT_FIELD_HELP, show=True)


def check_input_fields(input_format: str, text_field: str) -> None:
    """Both fields' checks, in each config's ``__post_init__``."""
    check(input_format in FORMAT_CHOICES, "input_format", f"must be one of {FORMAT_CHOICES}, got {input_format!r}")
    problem = text_field_problem(text_field)
    check(problem is None, "text_field", problem or "")
