"""One URL-password rule for both sides: the stricter one, that keeps ``?`` and ``#`` inside a password."""

from __future__ import annotations

import pytest

from bertstream.schemas.redact import REDACTED, redact, redact_values, url_passwords


@pytest.mark.parametrize(
    ("text", "shown", "password"),
    [
        ("s3://key:secret@bucket/ds", f"s3://key:{REDACTED}@bucket/ds", "secret"),
        ("http://u:p?w#d@host/x", f"http://u:{REDACTED}@host/x", "p?w#d"),
        ("--output=https://me:a#b@h/o more", f"--output=https://me:{REDACTED}@h/o more", "a#b"),
        ("ssh://git@host/repo", "ssh://git@host/repo", None),
        ("http://host/x?q=a:b@c", "http://host/x?q=a:b@c", None),
    ],
)
def test_url_passwords_are_redacted_with_question_marks_and_hashes(text, shown, password):
    assert redact(text) == shown
    assert url_passwords(text) == ([password] if password else [])


def test_both_sides_use_the_shared_rule():
    from bertstream.pipelines.common.redact import redact_options, redact_text

    text = "gs://u:p?w@b/x"
    assert redact_text(text) == redact(text) == f"gs://u:{REDACTED}@b/x"
    assert redact_options(["--input=" + text]) == ["--input=" + redact(text)]
    assert redact_values({"k": [text, (text,)]}) == {"k": [redact(text), (redact(text),)]}
