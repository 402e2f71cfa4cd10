"""Secrets by value, for both sides: the password of a URL (``http://user:pw@host/ds``,
``s3://key:secret@bucket``) never reaches a manifest, a config file, a log line or the console.

The password is everything between the first ``:`` after the scheme and the ``@`` of the authority, ``?`` and
``#`` included (a password may hold them; a URL's query cannot come before its ``@``). A bare ``user@``
(ssh-style names) is no secret. The pipelines add their own rules (secret option names, values met before);
this is the one URL rule both sides share.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
# scheme://userinfo@ where userinfo holds a ':' (a password).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):(?P<password>[^/\s@]*)@")


def url_passwords(text: str) -> list[str]:
    """The (non-empty) passwords of the ``scheme://user:password@`` URLs in ``text``."""
    return [m["password"] for m in _URL_PASSWORD.finditer(text) if m["password"]]


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced (the user is kept)."""
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}:{REDACTED}@", text)


def redact_values(value: Any) -> Any:
    """The same for every string (keys included) of a JSON-like value (dicts, lists, tuples)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_values(k): redact_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_values(v) for v in value)
    return value
