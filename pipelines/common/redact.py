"""Credentials passed as Beam options never reach a manifest, a log line or the console.

Manifests record the run's Beam options, and people publish manifests with their datasets: an option whose
name says key, secret, token, password or credential keeps its name and loses its value. Secrets are also
redacted by value: a URL carrying ``user:password@`` (in any option, input, output or vocabulary, a log
line, a progress line, an error, a manifest field) keeps its user and loses its password, by the rule both
sides share (``bertstream.schemas.redact``).
"""

from __future__ import annotations

import logging
import re

from bertstream.schemas.redact import REDACTED, redact, url_passwords

__all__ = [
    "REDACTED",
    "is_secret_option",
    "redact_logs",
    "redact_options",
    "redact_text",
    "secret_values",
    "url_passwords",
]

_SECRET_NAME = re.compile(r"key|secret|token|password|passwd|credential", re.IGNORECASE)
# Secret values met so far in this process (redact_logs registers them): every text loses them.
_KNOWN: set[str] = set()


def redact_text(text: str) -> str:
    """``text`` with URL passwords and the secret values registered by :func:`redact_logs` replaced."""
    text = redact(text)
    for s in sorted(_KNOWN, key=len, reverse=True):
        text = text.replace(s, REDACTED)
    return text


def is_secret_option(name: str) -> bool:
    """``--s3_secret_access_key`` -> True; ``--runner`` -> False."""
    return bool(_SECRET_NAME.search(name.lstrip("-")))


def redact_options(args: list[str]) -> list[str]:
    """Beam arguments with the values of secret options replaced, in both ``--name=value`` and ``--name value``
    forms (a value never starts with ``--`` in the second form, as Beam's parser reads it)."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = arg.partition("=")
        if arg.startswith("--") and is_secret_option(name):
            if eq:
                out.append(f"{name}={REDACTED}")
                continue
            hide_next = True
        out.append(redact(arg))
    return out


def secret_values(args: list[str]) -> list[str]:
    """The values :func:`redact_options` hides."""
    values = []
    for arg, shown in zip(args, redact_options(args)):
        if arg != shown and (shown == REDACTED or shown.endswith("=" + REDACTED)):
            values.append(arg.partition("=")[2] if shown.endswith("=" + REDACTED) else arg)
        values += url_passwords(arg)
    return [v for v in values if v]


def redact_logs(args: list[str]) -> None:
    """Every log record from now on (Beam's included) has the secret values of ``args`` replaced.

    A record factory, not a handler filter: Beam and its workers add handlers of their own.
    """
    secrets = sorted(set(secret_values(args)), key=len, reverse=True)
    _KNOWN.update(secrets)
    if not secrets:
        return
    make = logging.getLogRecordFactory()

    def factory(*a, **kw) -> logging.LogRecord:
        record = make(*a, **kw)
        text = record.getMessage()
        if any(s in text for s in secrets):
            for s in secrets:
                text = text.replace(s, REDACTED)
            record.msg, record.args = text, ()
        return record

    logging.setLogRecordFactory(factory)
