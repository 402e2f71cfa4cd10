"""The flags of every job that reads ``--input`` (pretraining, vocab, extract, the task commands), declared once:
``--input``, ``--format`` and ``--text-field``, with their checks. Light to import: the command lines build their
flags from these before any reader loads."""

from __future__ import annotations

from typing import Any

from bertstream.cli.errors import check
from bertstream.cli.options import opt
from bertstream.pipelines.inputs.formats import FORMATS

AUTO = "auto"  # --format auto: one of FORMATS per --input, judged from its content (inputs/detect.py)
FORMAT_CHOICES = (AUTO, *FORMATS)

TEXT_FIELD = "text"  # the default --text-field
TEXT_FIELD_HELP = "The field (jsonl) or column (parquet, arrow, csv) that holds the text; id and title are kept too."


def inputs_opt(compressed: bool = True) -> Any:
    """The ``--input`` field (repeatable); ``compressed``: its help says that compression follows the extension."""
    more = "; gz/bz2/xz/zst by extension." if compressed else "."  # common.files.COMPRESSED_SUFFIXES, by a test
    return opt(help=f"File, glob or URL (repeatable){more}", flag="--input")


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
