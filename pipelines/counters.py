"""Counter names, merging, and live reporting.

Counters travel through the pipeline as data (plain dicts merged by a global combine), so the manifest's
figures are exact on any runner. They are mirrored to Beam metrics for live monitoring (Dataflow UI) and
summarised on stderr as progress.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping

from apache_beam.metrics import Metrics

NAMESPACE = "bertstream"

FILES_READ = "files_read"
BYTES_READ = "bytes_read"
LINES = "lines_read"
DOCUMENTS_READ = "documents_read"
DOCUMENTS_USED = "documents_used"
SENTENCES = "sentences"
TOKENS = "tokens"
INSTANCES = "instances"
INSTANCES_CREATED = "instances_created"
INVALID_UTF8 = "invalid_utf8_replaced"
CONTROL_CHARS = "control_chars_removed"
SPECIAL_LITERALS = "special_token_literals_removed"
GUTENBERG_STRIPPED = "gutenberg_header_stripped"
# Header, marker and licence lines cut at Gutenberg markers (lines, not documents: the book itself is kept).
GUTENBERG_LINES_STRIPPED = "gutenberg_boilerplate_lines_stripped"
LINES_OUTSIDE_DOC = "lines_outside_doc_skipped"
UNCLOSED_DOC = "unclosed_doc_tags"
SINGLE_SENTENCE_DOCS = "single_sentence_documents"
EMPTY_SENTENCES = "empty_sentences_skipped"

DROP_PREFIX = "documents_dropped."
# Reasons a document is dropped (each counted under documents_dropped.<reason>).
EMPTY = "empty"  # no text at all
NO_TOKENS = "no_tokens"  # text that tokenizes to nothing (only whitespace/control characters)
MALFORMED_JSON = "malformed_json"
MISSING_TEXT = "missing_text_field"


def drop(reason: str) -> str:
    return DROP_PREFIX + reason


def dropped(counters: Mapping[str, int]) -> dict[str, int]:
    return {k[len(DROP_PREFIX) :]: v for k, v in sorted(counters.items()) if k.startswith(DROP_PREFIX)}


def merge(dicts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: Counter = Counter()
    for d in dicts:
        total.update(d)
    return dict(sorted(total.items()))


def report(counters: Mapping[str, int]) -> None:
    """Mirror counters to Beam metrics (visible in runner UIs while the job runs)."""
    for name, value in counters.items():
        if value:
            Metrics.counter(NAMESPACE, name).inc(value)


_last_progress = [0.0]


def progress(message: str, *, every_s: float = 0.0) -> None:
    """One progress line on stderr (workers' stderr reaches the console on the local runner)."""
    now = time.monotonic()
    if every_s and now - _last_progress[0] < every_s:
        return
    _last_progress[0] = now
    print(f"[bertprep] {message}", file=sys.stderr, flush=True)
