"""Secrets by value: the ``user:password@`` of a URL (``http://user:pw@host/ds``, ``s3://key:secret@bucket``)
is replaced wherever the trainer shows or writes a value: log lines, ``Error:`` lines, ``config.json`` (run and
checkpoint), ``metrics.jsonl``, ``results.json`` and embedding metadata. The option a URL came in does not
matter, nor does its place in a longer text.

(``trainer`` never imports ``pipelines``; this is the trainer's copy of the same rule.)
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
# scheme://userinfo@ where userinfo holds a ':' (a password); a bare user@ (ssh-style names) is no secret.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@]*):(?P<secret>[^/\s@]*)@")


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced (the user is kept)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)


def redact_values(value: Any) -> Any:
    """The same for every string (keys included) of a JSON-like value (dicts, lists, tuples)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_values(k): redact_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_values(v) for v in value)
    return value
