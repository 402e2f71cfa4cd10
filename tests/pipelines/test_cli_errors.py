"""Every ``bertprep`` command, given bad arguments, ends in one ``Error:`` line and exit code 2 (usage) or 1
(runtime), never a traceback. Run as a real process: Beam's log handlers write to the process's stderr,
which an in-process runner would not see."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_path

PROG = "from pipelines.cli import main; main(prog_name='bertprep')"


def bertprep(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-c", PROG, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def assert_clean_error(r: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    text = r.stdout + r.stderr
    lines = [line for line in text.splitlines() if line.strip()]
    assert r.returncode == code, text
    assert "Traceback" not in text, text
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], text
    for needle in needles:
        assert needle in errors[0], text
    return errors[0]


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> Path:
    """A folder of bad inputs and outputs."""
    d = tmp_path_factory.mktemp("bad")
    (d / "corrupt.gz").write_bytes(gzip.compress(b"Some sentence.\n" * 1000)[:-40])
    (d / "not-gzip.txt.gz").write_bytes(b"not gzip at all")
    (d / "empty.txt").write_text("")
    (d / "a-file").write_text("x")
    (d / "s.txt").write_text("One sentence here.\nAnother one.\n\nA second document.\nIts end.\n")
    (d / "train.tsv").write_text("text\tlabel\na module\tpos\n")
    (d / "train.json").write_text("not json")
    (d / "squad").mkdir()
    (d / "squad" / "train.json").write_text('{"data": [ broken')
    (d / "train.txt").write_text("this is not conll at all, just a sentence\n" * 5)
    left = d / "leftovers"
    (left / "_work").mkdir(parents=True)
    (left / "pretrain-00000-of-00004.arrow").write_bytes(b"half a shard")
    return d


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, demo_corpus, demo_vocab) -> Path:
    out = tmp_path_factory.mktemp("errors") / "ds"
    r = bertprep(
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
    )
    assert r.returncode == 0, r.stderr
    return out


def unwritable(bad: Path) -> str:
    """A folder this process cannot write: a read-only one, or (as root, who ignores modes) one under /sys."""
    if os.geteuid() == 0:
        return "/sys/bertprep-cannot-write-here"
    ro = bad / "read-only"
    ro.mkdir(exist_ok=True)
    ro.chmod(0o555)
    return str(ro)


def pretraining(bad: Path, vocab: Path, *extra: str, inputs: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    args = [a for i in (inputs or (str(bad / "s.txt"),)) for a in ("--input", i)]
    return bertprep("pretraining", *args, "--vocab", str(vocab / "vocab.txt"), "--dupe-factor", "1", *extra)


def test_pretraining_errors(bad, demo_vocab, tmp_path):
    out = str(tmp_path / "out")
    assert_clean_error(pretraining(bad, demo_vocab, "--output", str(bad / "a-file")), 2, "--output", "is a file")
    assert_clean_error(pretraining(bad, demo_vocab, "--output", unwritable(bad)), 2, "--output", "cannot write")
    assert_clean_error(
        pretraining(bad, demo_vocab, "--output", str(bad / "leftovers")),
        2,
        "leftovers of an unfinished run",
        "--overwrite",
    )
    assert_clean_error(
        pretraining(bad, demo_vocab, "--output", out, inputs=(str(bad / "empty.txt"),)), 2, "--input", "empty.txt"
    )
    assert_clean_error(
        pretraining(bad, demo_vocab, "--output", out, inputs=(str(bad / "nothing-*"),)),
        2,
        "--input",
        "matches no files",
    )
    assert_clean_error(
        pretraining(bad, demo_vocab, "--output", out, inputs=(str(bad / "corrupt.gz"),)), 1, "corrupt.gz"
    )
    assert_clean_error(pretraining(bad, demo_vocab, "--output", out, "--max-seq-length", "3"), 2, "--max-seq-length")
    assert_clean_error(pretraining(bad, demo_vocab, "--output", out, "--no-such-option=1"), 2, "--no_such_option")
    r = bertprep("pretraining", "--input", str(bad / "s.txt"), "--vocab", str(bad / "missing.txt"), "--output", out)
    assert_clean_error(r, 2, "--vocab")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_vocab_errors(bad, tmp_path):
    out = str(tmp_path / "voc")
    for name in ("corrupt.gz", "not-gzip.txt.gz"):
        assert_clean_error(bertprep("vocab", "--input", str(bad / name), "--output", out), 1, name)
    assert_clean_error(bertprep("vocab", "--input", str(bad / "empty.txt"), "--output", out), 1, "--input")
    assert_clean_error(bertprep("vocab", "--input", str(bad / "nothing-*"), "--output", out), 2, "--input")
    assert_clean_error(
        bertprep("vocab", "--input", str(bad / "s.txt"), "--output", out, "--vocab-size", "3"), 2, "--vocab-size"
    )
    assert_clean_error(bertprep("vocab", "--input", str(bad / "s.txt"), "--output", unwritable(bad)), 2, "--output")
    assert not (tmp_path / "voc" / "vocab.txt").exists()


def test_inspect_errors(dataset, tmp_path):
    assert_clean_error(bertprep("inspect", str(tmp_path / "nowhere")), 1, "no manifest.json")
    no_vocab = tmp_path / "no-vocab"
    shutil.copytree(dataset, no_vocab)
    (no_vocab / "vocab.txt").unlink()
    assert_clean_error(bertprep("inspect", str(no_vocab), "--decode", "1"), 1, "vocab.txt", "missing")
    escaping = tmp_path / "escaping"
    shutil.copytree(dataset, escaping)
    m = json.loads((escaping / "manifest.json").read_text())
    m["shards"][0]["path"] = "../other/" + m["shards"][0]["path"]
    (escaping / "manifest.json").write_text(json.dumps(m))
    assert_clean_error(bertprep("inspect", str(escaping), "--verify"), 1, "leaves the dataset folder")
    (escaping / "manifest.json").write_text("{not json")
    assert_clean_error(bertprep("inspect", str(escaping)), 1, "malformed JSON")
    assert_clean_error(bertprep("inspect"), 2, "DATASET_DIR")


def task(kind: str, bad: Path, vocab: Path, *args: str) -> subprocess.CompletedProcess:
    return bertprep("task", kind, "--vocab", str(vocab / "vocab.txt"), *args)


def test_task_errors(bad, demo_vocab, tmp_path):
    out = str(tmp_path / "t")
    cols = ("--text-column", "text", "--label-column", "label")
    started = time.monotonic()
    assert_clean_error(
        task(
            "classification", bad, demo_vocab, "--input", str(bad / "train.tsv"), *cols, "--output", str(bad / "a-file")
        ),
        2,
        "--output",
        "is a file",
    )
    assert time.monotonic() - started < 60  # refused before the work, not after it
    assert_clean_error(
        task("classification", bad, demo_vocab, "--input", str(bad / "train.tsv"), *cols, "--output", unwritable(bad)),
        2,
        "--output",
    )
    assert_clean_error(
        task(
            "classification",
            bad,
            demo_vocab,
            "--input",
            str(bad / "corrupt.gz"),
            "--format",
            "tsv",
            *cols,
            "--split",
            "train",
            "--output",
            out,
        ),
        1,
        "corrupt.gz",
    )
    assert_clean_error(
        task(
            "classification",
            bad,
            demo_vocab,
            "--input",
            str(bad / "train.tsv"),
            "--text-column",
            "nope",
            "--label-column",
            "label",
            "--output",
            out,
        ),
        2,
        "--text-column",
    )
    assert_clean_error(task("ner", bad, demo_vocab, "--input", str(bad / "train.txt"), "--output", out), 2, "--input")
    assert_clean_error(
        task("ner", bad, demo_vocab, "--input", str(bad / "train.txt"), "--output", out, "--window-overlap", "-1"),
        2,
        "--window-overlap",
    )
    assert_clean_error(
        task("squad", bad, demo_vocab, "--input", str(bad / "train.json"), "--output", out), 2, "--input"
    )
    assert_clean_error(
        task("squad", bad, demo_vocab, "--input", str(bad / "train.json"), "--output", out, "--articles", "x:y"),
        2,
        "--articles",
    )
    # Found while running: Beam used to log the worker's traceback at ERROR before our line.
    line = assert_clean_error(
        task("squad", bad, demo_vocab, "--input", str(bad / "squad" / "train.json"), "--output", out),
        1,
        "not SQuAD JSON",
        "no manifest was written",
    )
    assert "while running" not in line
    assert not (tmp_path / "t" / "manifest.json").exists()


def test_ctrl_c_during_a_run_is_one_line_and_exit_130(tmp_path, demo_vocab):
    wiki = shared_path("pretrain", "wikipedia")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PROG,
            "pretraining",
            "--input",
            f"wikiextractor:{wiki}/wiki_0[0-7]",
            "--vocab",
            str(demo_vocab / "vocab.txt"),
            "--output",
            str(out),
            "--dupe-factor",
            "2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not (out / "_work").exists() and time.monotonic() < deadline:  # the pipeline has started
        time.sleep(0.1)
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    r = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    assert_clean_error(r, 130, "interrupted")
    assert not (out / "manifest.json").exists() and not (out / "_work").exists()
