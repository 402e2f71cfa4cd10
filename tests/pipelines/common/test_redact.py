"""Secrets given as Beam options reach neither the manifest, nor the logs, nor the console."""

from __future__ import annotations

import json
import logging

from click.testing import CliRunner

from bertstream.pipelines.cli import main
from bertstream.pipelines.common.redact import REDACTED, redact_logs, redact_options

ARGS = [
    "--s3_secret_access_key=SECRET-1",
    "--s3_session_token",
    "TOKEN-2",
    "--s3_access_key_id=AKID-3",
    "--db_password=PW-4",
    "--gcp_credentials",
    "CRED-5",
    "--direct_num_workers=1",
]
SECRETS = ("SECRET-1", "TOKEN-2", "AKID-3", "PW-4", "CRED-5")


def test_redact_options_hides_values_of_secret_names_in_both_forms():
    assert redact_options(ARGS) == [
        f"--s3_secret_access_key={REDACTED}",
        "--s3_session_token",
        REDACTED,
        f"--s3_access_key_id={REDACTED}",
        f"--db_password={REDACTED}",
        "--gcp_credentials",
        REDACTED,
        "--direct_num_workers=1",
    ]
    assert redact_options(["--s3_session_token", "--runner=X"]) == ["--s3_session_token", "--runner=X"]


def test_log_records_lose_the_secret_values(caplog):
    old = logging.getLogRecordFactory()
    try:
        redact_logs(ARGS)
        with caplog.at_level(logging.ERROR, logger="apache_beam.test"):
            logging.getLogger("apache_beam.test").error("options: %s", " ".join(ARGS))
    finally:
        logging.setLogRecordFactory(old)
    assert caplog.records and not any(s in caplog.text for s in SECRETS)
    assert REDACTED in caplog.text


def test_manifest_and_console_hold_no_secret(tmp_path, demo_corpus, demo_vocab):
    old = logging.getLogRecordFactory()
    out = tmp_path / "ds"
    try:
        r = CliRunner().invoke(
            main,
            [
                "pretraining",
                "--input",
                str(demo_corpus / "a*.txt"),
                "--format",
                "text",
                "--vocab",
                str(demo_vocab / "vocab.txt"),
                "--output",
                str(out),
                "--dupe-factor",
                "1",
                "--num-shards",
                "1",
                "--s3_secret_access_key=SECRET-1",
                "--s3_session_token",
                "TOKEN-2",
                "--s3_access_key_id=AKID-3",
            ],
        )
    finally:
        logging.setLogRecordFactory(old)
    assert r.exit_code == 0, r.output + r.stderr
    manifest = (out / "manifest.json").read_text()
    for text in (manifest, r.output, r.stderr):
        assert not any(s in text for s in SECRETS)
    assert json.loads(manifest)["run"]["options"] == [
        f"--s3_secret_access_key={REDACTED}",
        "--s3_session_token",
        REDACTED,
        f"--s3_access_key_id={REDACTED}",
    ]


def test_task_manifest_holds_no_secret(tmp_path, demo_vocab):
    data = tmp_path / "train.tsv"
    data.write_text("text\tlabel\na module\tpos\nthe class\tneg\n")
    old = logging.getLogRecordFactory()
    try:
        r = CliRunner().invoke(
            main,
            [
                "task",
                "classification",
                "--input",
                str(data),
                "--text-column",
                "text",
                "--label-column",
                "label",
                "--vocab",
                str(demo_vocab / "vocab.txt"),
                "--output",
                str(tmp_path / "t"),
                "--s3_session_token=TOKEN-2",
            ],
        )
    finally:
        logging.setLogRecordFactory(old)
    assert r.exit_code == 0, r.output
    manifest = (tmp_path / "t" / "manifest.json").read_text()
    assert "TOKEN-2" not in manifest and "TOKEN-2" not in r.output
    assert json.loads(manifest)["run"]["options"] == [f"--s3_session_token={REDACTED}"]


def test_url_passwords_are_redacted_by_value_wherever_they_appear():
    from bertstream.pipelines.common.redact import redact_text, secret_values

    args = ["--s3_endpoint_url=http://user:pw-7@host:9000", "--runner=X", "--other", "https://a:b-8@h/p"]
    assert redact_options(args) == [
        f"--s3_endpoint_url=http://user:{REDACTED}@host:9000",
        "--runner=X",
        "--other",
        f"https://a:{REDACTED}@h/p",
    ]
    assert set(secret_values(args)) == {"pw-7", "b-8"}
    assert (
        redact_text("cannot read s3+x://k:v-9@b/x and http://host/y")
        == f"cannot read s3+x://k:{REDACTED}@b/x and http://host/y"
    )
