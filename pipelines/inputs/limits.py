"""The cap on one record of input, for every reader (dumps, JSONL, text, Parquet, Arrow, task files): a page, a
line, a row, a book (``text``) or a SQuAD article over ``MAX_RECORD_BYTES`` is refused in one line that names
the file, the record and the cap (:func:`bertstream.pipelines.common.files.record_too_big`), so that memory stays
bounded by the cap (and a reader's buffer) whatever the input holds, and work stays linear in what is decompressed.

Generous for real data: an English Wikipedia page is at most a few MB of wikitext, a long book tens of MB.
The readers read this name when they run (tests lower it with ``monkeypatch``).
"""

from __future__ import annotations

MAX_RECORD_BYTES = 64 << 20  # bytes of one record as decompressed (a page's XML, a line, a row's text, a book)
