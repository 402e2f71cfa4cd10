"""Requests that cannot be answered end with a deadline (issue 53, item 5): an object store or a job service at a
closed port is refused in one line naming the URL, before Beam's clients retry or wait on it. Loopback only."""

from __future__ import annotations

import threading

import pytest
from click.testing import CliRunner

from bertstream.cli.errors import UsageError
from bertstream.pipelines.cli import main
from bertstream.pipelines.runners import reach


def _invoke(args: list[str], seconds: float = 90):
    """The command's result, or a failure when it is still waiting after ``seconds`` (a hang, not a timing)."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", CliRunner().invoke(main, args)), daemon=True)
    t.start()
    t.join(seconds)
    assert "r" in box, f"bertprep {' '.join(args[:2])} still waiting after {seconds} s on a closed port"
    return box["r"]


def _one_error(r, *words: str) -> None:
    assert r.exit_code == 2, (r.output, r.exception)
    error = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and all(w in error[0] for w in words), r.output
    assert "Traceback" not in r.output


def test_an_object_store_at_a_closed_port_is_named_in_one_line(tmp_path, closed_port, monkeypatch, demo_vocab):
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    server = f"http://127.0.0.1:{closed_port}"
    vocab = str(demo_vocab / "vocab.txt")
    corpus = tmp_path / "c.txt"
    corpus.write_text("One sentence here.\nAnother one there.\n")
    cases = [  # each flag that takes a URL, the endpoint as an option or from the environment
        (["pretraining", "--input", "s3://b/corpus.txt", "--vocab", vocab, "--output", str(tmp_path / "o")], "--input"),
        (
            ["pretraining", "--input", str(corpus), "--vocab", "s3://b/vocab.txt", "--output", str(tmp_path / "o")],
            "--vocab",
        ),
        (["pretraining", "--input", str(corpus), "--vocab", vocab, "--output", "s3://b/out"], "--output"),
        (["extract", "--input", str(corpus), "--output", "s3://b/docs"], "--output"),
    ]
    for args, flag in cases:
        r = _invoke([*args, f"--s3_endpoint_url={server}"])
        url = args[args.index(flag) + 1]
        _one_error(r, f"'{flag}'", url, f"the server {server} refuses connections")
    monkeypatch.setenv("AWS_ENDPOINT_URL", server)
    r = _invoke(["vocab", "--input", "s3://b/corpus.txt", "--output", str(tmp_path / "v")])
    _one_error(r, "'--input'", "s3://b/corpus.txt", f"the server {server} refuses connections")
    assert not (tmp_path / "o").exists() and not (tmp_path / "v").exists()
    # inspect and report (round 8: they took no filesystem options and never probed: a Beam error instead)
    for args in (["inspect", "s3://b/ds"], ["report", "s3://b/ds"]):
        _one_error(_invoke(args), "'DATASET_DIR'", f"the server {server} refuses connections")


def test_a_label_set_from_url_at_a_closed_port_is_named_in_one_line(tmp_path, closed_port, monkeypatch, demo_vocab):
    # Round 7: `task classification --label-set-from s3://...` with no network printed nothing past 60 s (the other
    # URL flags were probed, this one was not).
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    server = f"http://127.0.0.1:{closed_port}"
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\na fine film .\t1\na dull one .\t0\n")
    args = ["task", "classification", "--glue", "sst2", "--split", "dev", "--input", str(dev)]
    args += ["--vocab", str(demo_vocab / "vocab.txt"), "--output", str(tmp_path / "o")]
    r = _invoke([*args, "--label-set-from", "s3://b/train", f"--s3_endpoint_url={server}"])
    _one_error(r, "'--label-set-from'", "s3://b/train", f"the server {server} refuses connections")
    assert not (tmp_path / "o").exists()


def test_a_job_service_at_a_closed_port_is_named_in_one_line(tmp_path, closed_port, demo_vocab):
    corpus = tmp_path / "c.txt"
    corpus.write_text("One sentence here.\nAnother one there.\n")
    args = ["pretraining", "--input", str(corpus), "--vocab", str(demo_vocab / "vocab.txt")]
    args += ["--output", str(tmp_path / "o"), "--runner", "PortableRunner", f"--job_endpoint=localhost:{closed_port}"]
    _one_error(_invoke(args), f"--job_endpoint=localhost:{closed_port}: the job service refuses connections")


def test_the_probe_reads_the_endpoint_as_beam_and_botocore_do(monkeypatch):
    from apache_beam.options.pipeline_options import PipelineOptions

    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    assert reach.store_endpoint("/data/x") is None and reach.store_endpoint("hdfs://n/x") is None
    assert reach.store_endpoint("s3://b/x") == "https://s3.amazonaws.com"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert reach.store_endpoint("s3://b/x") == "https://s3.eu-west-1.amazonaws.com"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/")
    assert reach.store_endpoint("s3://b/x") == "http://127.0.0.1:9000"
    options = PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:9001"])
    assert reach.store_endpoint("s3://b/x", options) == "http://127.0.0.1:9001"
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        reach.probe_job_endpoint(PipelineOptions(["--job_endpoint=nowhere"]))


@pytest.mark.slow
def test_inspect_and_report_read_a_dataset_in_an_object_store(tmp_path, s3_server, demo_vocab):
    """Round 8: ``bertprep inspect s3://...`` and ``report`` took no Beam options, so Beam's S3 filesystem had
    none and every read failed ('Must provide one of client or options'), even of a dataset bertprep had just
    written there. In a process of its own, as a user runs it (the fixture's options are this process's)."""
    import os
    import subprocess
    import sys

    root = s3_server.bucket("inspect-test")
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"Sentence {i} of a document here.\\nAnother one follows.\\n\\n" for i in range(30)))
    vocab = str(demo_vocab / "vocab.txt")
    args = ["pretraining", "--input", str(corpus), "--format", "sentences", "--vocab", vocab, "--dupe-factor", "1"]
    r = CliRunner().invoke(main, [*args, "--output", f"{root}/ds", *s3_server.beam_args])
    assert r.exit_code == 0, r.output
    run = [sys.executable, "-c", "from bertstream.pipelines.cli import main; main()"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    ins = subprocess.run([*run, "inspect", f"{root}/ds", "--verify"], capture_output=True, text=True, env=env)
    assert ins.returncode == 0 and "verify: 4/4 shards ok" in ins.stdout, ins.stderr
    rep = subprocess.run(
        [*run, "report", f"{root}/ds", "--output", str(tmp_path / "r")], capture_output=True, text=True, env=env
    )
    assert rep.returncode == 0 and (tmp_path / "r" / "index.html").is_file(), rep.stderr
