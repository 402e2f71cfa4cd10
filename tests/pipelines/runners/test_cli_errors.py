"""Every ``bertprep`` command, given bad arguments, ends in one ``Error:`` line and exit code 2 (usage) or 1
(runtime), never a traceback. What runs a pipeline, passes Beam options or depends on signals runs as a real
process (:func:`bertprep_process`): Beam's log handlers and its workers write to the process's stderr. A refusal
that comes before any pipeline runs is the same code in this process (:func:`bertprep`, log records captured
with the output), without an interpreter start and Beam's import for each of some fifty cases."""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bertstream.pipelines.inputs.formats import FIELD_FORMATS
from tests.conftest import REPO, shared_path
from tests.processes import child_processes, ctrl_c_reaches_it, wait_until

PROG = "from bertstream.pipelines.cli import main; main(prog_name='bertprep')"


def bertprep_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-c", PROG, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def bertprep(*args: str) -> subprocess.CompletedProcess:
    """``bertprep ARGS`` in this process, its output as a process's would be: stdout, and stderr with every log
    record written while it ran (a library's warning before the Error line counts against it)."""
    from click.testing import CliRunner

    from bertstream.pipelines.cli import main

    records = io.StringIO()
    handler = logging.StreamHandler(records)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        r = CliRunner().invoke(main, list(args), prog_name="bertprep")
    finally:
        root.removeHandler(handler)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception  # a traceback a process would print: the test shows it whole
    return subprocess.CompletedProcess(["bertprep", *args], r.exit_code, r.stdout, records.getvalue() + r.stderr)


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


def pretraining(
    bad: Path, vocab: Path, *extra: str, inputs: tuple[str, ...] = (), process: bool = False
) -> subprocess.CompletedProcess:
    args = [a for i in (inputs or (str(bad / "s.txt"),)) for a in ("--input", i)]
    run = bertprep_process if process else bertprep
    return run("pretraining", *args, "--vocab", str(vocab / "vocab.txt"), "--dupe-factor", "1", *extra)


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
    r = pretraining(bad, demo_vocab, "--output", out, "--no-such-option=1")  # Beam's own parser
    assert_clean_error(r, 2, "unknown option: --no-such-option")  # as typed (issue 33)
    r = bertprep("pretraining", "--input", str(bad / "s.txt"), "--vocab", str(bad / "missing.txt"), "--output", out)
    assert_clean_error(r, 2, "--vocab")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_library_message_with_line_breaks_is_one_line_and_no_empty_output_is_left(bad, demo_vocab, tmp_path):
    """pyarrow ends a bad footer's message with a line break, which split the Error line in two; and the run,
    refused after its first line, left the --output folder it had made (and its parents) behind, empty."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "zeroed-footer.parquet"
    pq.write_table(pa.table({"text": ["One sentence. Another one."] * 4}), path)
    data = bytearray(path.read_bytes())
    data[-8:-4] = bytes(4)  # the footer's length
    path.write_bytes(bytes(data))
    out = tmp_path / "new" / "out"
    r = pretraining(bad, demo_vocab, "--output", str(out), inputs=(f"parquet:{path}",))
    line = assert_clean_error(r, 1, "zeroed-footer.parquet", "not a readable Parquet file")
    assert "  " not in line and " )" not in line
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # a folder the user made stays, empty or not
    r = pretraining(bad, demo_vocab, "--output", str(tmp_path / "mine"), inputs=(f"parquet:{path}",))
    assert r.returncode == 1 and (tmp_path / "mine").is_dir()


def test_worker_counts_past_the_machine_are_refused_in_one_line(bad, demo_vocab, tmp_path):
    """--direct_num_workers=200 on a 4 KB input took 79 s and 9.3 GB (issue 44): twice the cores at most."""
    from bertstream.cli.machine import process_ceiling

    many = process_ceiling() + 1
    out = str(tmp_path / "out")
    r = pretraining(bad, demo_vocab, "--output", out, f"--direct_num_workers={many}")
    error = assert_clean_error(r, 2, f"--direct_num_workers={many} is more than this machine runs")
    assert f"at most {process_ceiling()} (2 per core" in error
    r = bertprep("extract", "--input", str(bad / "s.txt"), "--output", out, f"--direct_num_workers={many}")
    assert_clean_error(r, 2, f"--direct_num_workers={many}")
    assert not (tmp_path / "out").exists()


def test_output_root_is_the_root_not_the_current_folder(bad, demo_vocab, tmp_path, monkeypatch):
    """`--output /` lost its slash and wrote into the current folder (issue 44)."""
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    r = pretraining(bad, demo_vocab, "--output", "/")
    assert_clean_error(r, 2, "'--output': / overlaps inputs")
    assert_clean_error(pretraining(bad, demo_vocab, "--output", ""), 2, "'--output': is empty")
    assert not any(here.iterdir())


def test_a_text_field_with_no_input_of_fields_is_refused(bad, demo_vocab, tmp_path):
    """--text-field with line formats only was ignored silently (issue 44): every argument is used or refused."""
    out = str(tmp_path / "out")
    applies = f"'--text-field': 'body' applies to {', '.join(FIELD_FORMATS)} inputs; these are "
    r = pretraining(bad, demo_vocab, "--output", out, "--text-field", "body")
    assert_clean_error(r, 2, applies + "sentences")  # (--format auto's choice)
    r = bertprep("extract", "--input", f"text:{bad / 's.txt'}", "--output", out, "--text-field", "body")
    assert_clean_error(r, 2, applies + "text")
    r = bertprep("vocab", "--input", f"sentences:{bad / 's.txt'}", "--output", out, "--text-field", "body")
    assert_clean_error(r, 2, applies + "sentences")
    assert not (tmp_path / "out").exists()


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


def task(kind: str, bad: Path, vocab: Path, *args: str, process: bool = False) -> subprocess.CompletedProcess:
    return (bertprep_process if process else bertprep)("task", kind, "--vocab", str(vocab / "vocab.txt"), *args)


def test_task_errors(bad, demo_vocab, tmp_path):
    out = str(tmp_path / "t")
    cols = ("--text-column", "text", "--label-column", "label")
    assert_clean_error(
        task(
            "classification", bad, demo_vocab, "--input", str(bad / "train.tsv"), *cols, "--output", str(bad / "a-file")
        ),
        2,
        "--output",
        "is a file",
    )
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
            f"wikiextractor:{wiki}/wiki_*",
            "--vocab",
            str(demo_vocab / "vocab.txt"),
            "--output",
            str(out),
            "--dupe-factor",
            "10",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )
    # Mid-run: the first documents are tokenized and spilled, the instances of 10 passes over 16 MB (several
    # seconds, even on a fast machine) are not yet made. A fixed sleep went stale once the pipeline got faster.
    _wait_mid_run(out, p)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    r = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    assert_clean_error(r, 130, "interrupted (Ctrl-C)")
    assert not (out / "manifest.json").exists() and not (out / "_work").exists()


# ----------------------------------------------------------------------------------- reliability, round 3
# One test per principle of issue 17, each over several cases of its class, and the listed cases themselves.


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` with its bytes: what "nothing was destroyed" compares."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def made(tmp_path, demo_vocab, bad) -> Path:
    """A finished pretraining dataset of ``bad/s.txt`` in a folder of its own."""
    out = tmp_path / "made"
    r = pretraining(bad, demo_vocab, "--output", str(out), "--num-shards", "1")
    assert r.returncode == 0, r.stderr
    return out


def test_overwrite_destroys_nothing_before_every_input_and_option_is_checked(made, bad, demo_vocab, tmp_path):
    """Principle: a command never destroys what it did not make, nor before it has checked its inputs."""
    before = snapshot(made)
    vocab = str(demo_vocab / "vocab.txt")
    attempts = [
        (("--input", str(bad / "nothing-*"), "--vocab", vocab), 2, "matches no files"),  # a mistyped --input
        (("--input", str(bad / "s.txt"), "--vocab", str(bad / "missing.txt")), 2, "--vocab"),
        (("--input", str(bad / "empty.txt"), "--vocab", vocab), 2, "empty"),
        (("--input", str(bad / "s.txt"), "--vocab", vocab, "--no_such_beam_option=1"), 2, "--no_such_beam_option"),
        (("--input", str(bad / "corrupt.gz"), "--vocab", vocab), 1, "corrupt.gz"),  # found while running
    ]
    for args, code, needle in attempts:
        run = bertprep_process if code == 1 or "--no_such_beam_option=1" in args else bertprep  # a run, Beam's parser
        r = run("pretraining", *args, "--output", str(made), "--overwrite", "--dupe-factor", "1")
        assert_clean_error(r, code, needle)
        assert snapshot(made) == before, args
    # The output is the input folder: its manifest and shards would be read as text, after being deleted.
    # (--format given: --format auto would first refuse the folder's mix of manifest, shards and vocabulary)
    r = bertprep("pretraining", "--input", f"text:{made}/*", "--vocab", vocab, "--output", str(made), "--overwrite")
    assert_clean_error(r, 2, "--output", "overlaps inputs")
    assert snapshot(made) == before
    # The vocabulary inside the output, through a link to the folder: links are resolved before comparing.
    link = tmp_path / "link-to-made"
    link.symlink_to(made)
    r = bertprep(
        "pretraining",
        "--input",
        str(bad / "s.txt"),
        "--vocab",
        str(link / "vocab.txt"),
        "--output",
        str(made),
        "--overwrite",
    )
    assert_clean_error(r, 2, "--output", "overlaps --vocab")
    assert snapshot(made) == before


def test_task_overwrite_keeps_a_label_set_inside_the_output(bad, demo_vocab, tmp_path):
    out = tmp_path / "cls"
    cols = ("--text-column", "text", "--label-column", "label", "--split", "train")
    r = task("classification", bad, demo_vocab, "--input", str(bad / "train.tsv"), *cols, "--output", str(out))
    assert r.returncode == 0, r.stderr
    before = snapshot(out)
    r = task(
        "classification",
        bad,
        demo_vocab,
        "--input",
        str(bad / "train.tsv"),
        "--text-column",
        "text",
        "--label-column",
        "label",
        "--split",
        "dev",
        "--label-set-from",
        str(out),
        "--output",
        str(out),
        "--overwrite",
    )
    assert_clean_error(r, 2, "overlaps --label-set-from")
    assert snapshot(out) == before


def test_outputs_are_owned(made, bad, demo_vocab, tmp_path):
    """Principle: an output folder is empty, or holds this command's own run (needs --overwrite), or is refused."""
    vocab = str(demo_vocab / "vocab.txt")
    # Someone else's file: refused with and without --overwrite, and kept.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for extra in ((), ("--overwrite",)):
        r = bertprep("pretraining", "--input", str(bad / "s.txt"), "--vocab", vocab, "--output", str(other), *extra)
        assert_clean_error(r, 2, "--output", "notes.txt", "not a pretraining dataset")
    assert (other / "notes.txt").read_text() == "mine"
    # Another command's dataset: a task dataset is not replaced by a pretraining run, nor the reverse.
    cls = tmp_path / "cls"
    cols = ("--text-column", "text", "--label-column", "label", "--split", "train")
    assert (
        task(
            "classification", bad, demo_vocab, "--input", str(bad / "train.tsv"), *cols, "--output", str(cls)
        ).returncode
        == 0
    )
    before = snapshot(cls)
    r = bertprep("pretraining", "--input", str(bad / "s.txt"), "--vocab", vocab, "--output", str(cls), "--overwrite")
    assert_clean_error(r, 2, "--output", "classification dataset")
    assert snapshot(cls) == before
    r = task(
        "classification",
        bad,
        demo_vocab,
        "--input",
        str(bad / "train.tsv"),
        *cols,
        "--output",
        str(made),
        "--overwrite",
    )
    assert_clean_error(r, 2, "--output", "pretraining dataset")
    # A vocabulary folder: its own earlier run needs --overwrite; a dataset folder is not a vocabulary's.
    voc = tmp_path / "voc"
    args = ("vocab", "--input", str(bad / "s.txt"), "--vocab-size", "100", "--min-frequency", "1", "--output")
    assert bertprep(*args, str(voc)).returncode == 0
    first = snapshot(voc)
    assert_clean_error(bertprep(*args, str(voc)), 2, "--output", "already holds a vocabulary", "--overwrite")
    assert bertprep(*args, str(voc), "--overwrite").returncode == 0
    assert snapshot(voc) == first  # deterministic: the same files again
    assert_clean_error(bertprep(*args, str(made), "--overwrite"), 2, "--output", "not a vocabulary")


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_run_left_behind():
    """A test that fails while a run it started goes on must not leave that run (and its workers) behind."""
    yield
    while _STARTED:
        p = _STARTED.pop()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


def _popen(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [sys.executable, "-c", PROG, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _STARTED.append(p)
    return p


def _wiki_run(out: Path, demo_vocab: Path, *extra: str) -> subprocess.Popen:
    """A pretraining run long enough to be caught in the middle (the 16 Wikipedia files, dupe 10: several
    seconds after its first spill file, on a fast machine too)."""
    wiki = shared_path("pretrain", "wikipedia")
    vocab = str(demo_vocab / "vocab.txt")
    return _popen(
        "pretraining",
        "--input",
        f"wikiextractor:{wiki}/wiki_*",
        "--vocab",
        vocab,
        "--output",
        str(out),
        "--dupe-factor",
        "10",
        *extra,
    )


def _wait_mid_run(out: Path, p: subprocess.Popen) -> None:
    """Until the run has spilled its first tokenized documents (its instances are still to be made)."""
    wait_until(lambda: bool(list(out.glob("_work/*/train/docs-*.bin"))), p, what="a spill file")


def _wait_for(path: Path, p: subprocess.Popen) -> None:
    wait_until(path.exists, p, what=str(path))


def test_two_runs_into_one_output_the_second_is_refused_by_the_lock(tmp_path, demo_vocab):
    wiki = shared_path("pretrain", "wikipedia")
    out = tmp_path / "out"
    args = ("pretraining", "--input", f"wikiextractor:{wiki}/wiki_*", "--vocab", str(demo_vocab / "vocab.txt"))
    first = _popen(*args, "--output", str(out), "--dupe-factor", "10")  # still running when the second starts
    _wait_for(out / ".bertprep.lock", first)
    work = [p.name for p in (out / "_work").iterdir()] if (out / "_work").exists() else []
    second = bertprep(*args, "--output", str(out), "--dupe-factor", "1", "--overwrite")
    assert_clean_error(second, 2, "--output", "being written by another run", f"pid {first.pid}")
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["dupe_factor"] == 10  # the first run's, whole
    # Work files are the run's own: _work/RUN_ID, removed at the end with the lock.
    assert work in ([], [manifest["run"]["run_id"]])
    assert not (out / "_work").exists() and not (out / ".bertprep.lock").exists()


def test_a_stale_lock_of_a_killed_run_is_taken_over(made, bad, demo_vocab):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    lock = {"run_id": "killed", "pid": int(dead.stdout), "host": socket.gethostname(), "command": "bertprep"}
    (made / ".bertprep.lock").write_text(json.dumps(lock))
    r = pretraining(bad, demo_vocab, "--output", str(made), "--overwrite")
    assert r.returncode == 0, r.stderr
    assert "stale lock" in r.stderr and not (made / ".bertprep.lock").exists()
    # A live run's lock (this test's own process) is respected.
    (made / ".bertprep.lock").write_text(json.dumps({**lock, "pid": os.getpid()}))
    assert_clean_error(pretraining(bad, demo_vocab, "--output", str(made), "--overwrite"), 2, "another run")


def test_an_input_is_its_content_read_once_as_listed(tmp_path, demo_vocab, bad):
    """Principle: links resolved, literal paths, link loops walked once; the manifest lists what was read."""
    d = tmp_path / "brk"
    d.mkdir()
    (d / "part1.txt").write_text("The glob would read this one.\nIt is not the one named.\n")
    (d / "part[1].txt").write_text("The literal file is this one.\nIt is read.\n\nSecond document here.\nEnd.\n")
    (d / "link.txt").symlink_to(d / "part[1].txt")
    (d / "loop").mkdir()
    (d / "loop" / "up").symlink_to(d)
    out = tmp_path / "out"
    vocab = str(demo_vocab / "vocab.txt")
    r = bertprep("pretraining", "--input", str(d / "part[1].txt"), "--vocab", vocab, "--output", str(out))
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert [i["path"] for i in m["inputs"]] == [str(d / "part[1].txt")]
    assert m["inputs"][0]["bytes"] == (d / "part[1].txt").stat().st_size == m["counters"]["bytes_read"]
    # A link beside its target, and a folder looping back to itself through a link: each file once.
    out2 = tmp_path / "out2"
    r = bertprep("pretraining", "--input", str(d / "**" / "*.txt"), "--vocab", vocab, "--output", str(out2))
    assert r.returncode == 0, r.stderr
    m = json.loads((out2 / "manifest.json").read_text())
    assert sorted(i["path"] for i in m["inputs"]) == [str(d / "part1.txt"), str(d / "part[1].txt")]
    assert m["counters"]["bytes_read"] == sum(i["bytes"] for i in m["inputs"])
    assert "read once" in r.stderr and "walked once" in r.stderr


def test_a_file_that_changes_after_listing_fails_the_run_naming_it(tmp_path, demo_vocab, monkeypatch):
    from bertstream.pipelines.common.files import InputError
    from bertstream.pipelines.pretraining import pipeline as pre
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob

    f = tmp_path / "growing.txt"
    f.write_text("A first sentence.\nA second one.\n\n" * 200)
    listed = pre.resolve_inputs

    def list_then_append(*a, **kw):
        files = listed(*a, **kw)
        with f.open("a") as w:  # a writer still appending when the run starts
            w.write("More text arrives.\n" * 100)
        return files

    monkeypatch.setattr(pre, "resolve_inputs", list_then_append)
    with pytest.raises(Exception) as e:
        pre.run_pretraining(
            PretrainingJob(
                inputs=tuple([str(f)]),
                vocab=str(demo_vocab / "vocab.txt"),
                output=str(tmp_path / "out"),
                config=PretrainingConfig(dupe_factor=1, num_shards=1),
            )
        )
    from bertstream.pipelines.runners.cli_errors import input_error_in

    assert isinstance(e.value, InputError) or input_error_in(e.value)
    assert "growing.txt changed while this run read it" in str(e.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize(("encoding", "name"), [("utf-16", "UTF-16-LE"), ("utf-16-be", None), ("utf-32", "UTF-32-LE")])
def test_bytes_are_what_they_claim_a_utf16_or_utf32_file_is_refused_naming_it(tmp_path, demo_vocab, encoding, name):
    """Principle: bytes are what they claim; a BOM of another encoding is refused (pretraining and vocab)."""
    f = tmp_path / "wide.txt"
    text = "Une phrase ici.\nUne autre.\n\nSecond document.\n"
    f.write_bytes(("\ufeff" + text).encode(encoding) if name is None else text.encode(encoding))
    for args in (
        ("pretraining", "--vocab", str(demo_vocab / "vocab.txt"), "--output", str(tmp_path / "out")),
        ("vocab", "--output", str(tmp_path / "voc")),
    ):
        assert_clean_error(bertprep(*args, "--input", str(f)), 1, "wide.txt", "UTF-", "not UTF-8")


@pytest.mark.parametrize("ext", [".gz", ".zst", ".bz2", ".xz"])
def test_a_zero_byte_compressed_file_fails_the_run_naming_it(tmp_path, demo_vocab, bad, ext):
    empty = tmp_path / f"empty.txt{ext}"
    empty.write_bytes(b"")
    r = pretraining(bad, demo_vocab, "--output", str(tmp_path / "out"), inputs=(str(bad / "s.txt"), str(empty)))
    assert_clean_error(r, 1, f"empty.txt{ext}", "empty file")
    assert_clean_error(bertprep("vocab", "--input", str(empty), "--output", str(tmp_path / "v")), 1, f"empty.txt{ext}")


def test_a_url_password_reaches_no_manifest_log_or_console(tmp_path, demo_vocab, bad):
    """Principle: secrets are redacted by value: a URL's user:password@ in any option, line or manifest field."""
    out = tmp_path / "out"
    r = pretraining(bad, demo_vocab, "--output", str(out), "--s3_endpoint_url=http://user:s3cr3tpw@host:9000")
    assert r.returncode == 0, r.stderr
    text = (out / "manifest.json").read_text()
    assert "s3cr3tpw" not in text and "http://user:<redacted>@host:9000" in text
    assert "s3cr3tpw" not in r.stdout + r.stderr
    # An input, a vocabulary and an output given as URLs with credentials: the error lines keep none.
    for args in (
        ("pretraining", "--input", "http://me:hunter2@example.com/c.txt", "--vocab", str(demo_vocab / "vocab.txt")),
        ("pretraining", "--input", str(bad / "s.txt"), "--vocab", "http://me:hunter2@example.com/vocab.txt"),
        ("vocab", "--input", "http://me:hunter2@example.com/c.txt"),
    ):
        r = bertprep(*args, "--output", str(tmp_path / "o"))
        line = assert_clean_error(r, r.returncode)
        assert r.returncode in (1, 2) and "hunter2" not in r.stdout + r.stderr, line


def test_worker_processes_fail_in_one_line(bad, demo_vocab, tmp_path):
    """Principle: one line, always; here with worker processes, whose tracebacks go to a log file."""
    r = pretraining(
        bad,
        demo_vocab,
        "--output",
        str(tmp_path / "out"),
        "--direct_num_workers=2",
        inputs=(str(bad / "corrupt.gz"), str(bad / "s.txt")),
        process=True,  # the workers write to the process' stderr, which only a process shows
    )
    assert_clean_error(r, 1, "corrupt.gz", "no manifest was written")
    assert "ERROR:" not in r.stderr and "apache_beam" not in r.stderr


def test_a_killed_worker_is_one_line(tmp_path, demo_vocab):
    out = tmp_path / "out"
    p = _wiki_run(out, demo_vocab, "--direct_num_workers=2")
    _wait_for(out / "_work", p)
    wait_until(lambda: bool(child_processes(p.pid, "bertstream.pipelines.runners.beam_worker")), p, what="workers")
    workers = child_processes(p.pid, "bertstream.pipelines.runners.beam_worker")
    _wait_mid_run(out, p)  # the workers are at work (was: a second's sleep, which load 10 can outlast)
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = p.communicate(timeout=300)
    r = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    assert_clean_error(r, 1, "worker process died", "no manifest was written")
    assert not (out / "manifest.json").exists() and not (out / "_work").exists()


def test_an_unforeseen_failure_is_one_line_naming_a_log(bad, demo_vocab, tmp_path):
    broken = (
        "import bertstream.pipelines.inputs.read as r\n"
        "def boom(*a, **k):\n    raise ZeroDivisionError('an error nobody foresaw')\n"
        "r.block_lines = boom\n" + PROG
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    args = ["pretraining", "--input", str(bad / "s.txt"), "--vocab", str(demo_vocab / "vocab.txt")]
    r = subprocess.run(
        [sys.executable, "-c", broken, *args, "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    line = assert_clean_error(r, 1, "ZeroDivisionError", "an error nobody foresaw", "details: ")
    log = Path(line.rsplit("details: ", 1)[1].rstrip(")"))
    assert "Traceback" in log.read_text() and "boom" in log.read_text()
    log.unlink()


def test_a_sigterm_a_finalizer_swallowed_ends_the_run_interrupted_and_the_earlier_dataset_back(
    bad, demo_vocab, tmp_path
):
    """Round 9: SIGTERM to `bertprep pretraining --overwrite` as its work folder appeared landed in a finalizer
    ("Exception ignored in" and a traceback): the interruption was lost, the run went on to publish its dataset
    over the earlier one and exit 0. Here a finalizer the collector runs as the pipeline is made takes it."""
    out = tmp_path / "out"
    args = ["pretraining", "--input", str(bad / "s.txt"), "--vocab", str(demo_vocab / "vocab.txt")]
    first = bertprep_process(*args, "--output", str(out))
    assert first.returncode == 0, first.stderr
    earlier = (out / "manifest.json").read_bytes()
    swallowing = (
        "import os, signal\n"
        "import bertstream.pipelines.runners.dataset_run as run\n"
        "class Collected:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        signal.sigtimedwait([], 0)\n"  # the handler runs here, inside the finalizer
        "make = run.make_pipeline\n"
        "def making(*a, **k):\n"
        "    Collected()\n"  # collected at once
        "    return make(*a, **k)\n"
        "run.make_pipeline = making\n" + PROG
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-c", swallowing, *args, "--seed", "7", "--output", str(out), "--overwrite"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert_clean_error(r, 143, "interrupted (SIGTERM)")
    assert (out / "manifest.json").read_bytes() == earlier and not (out / "_work").exists()


@pytest.mark.parametrize(
    "sig",
    [
        signal.SIGTERM,
        pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
        pytest.param(signal.SIGQUIT, marks=pytest.mark.slow),
    ],
)
def test_sigterm_is_ctrl_c_one_line_exit_143_work_removed(tmp_path, demo_vocab, sig):
    """SIGHUP (the terminal closed) too, as SIGTERM (issue 53): it killed the run on the spot, its lock left and
    an --overwrite's earlier dataset in the work folder. And SIGQUIT (Ctrl-\\ in a terminal; round 7): it dumped
    core, and an --overwrite's earlier dataset waited in _work/ for the next run to put it back."""
    out = tmp_path / "out"
    p = _wiki_run(out, demo_vocab)
    _wait_mid_run(out, p)
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=120)
    done = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    assert_clean_error(done, 128 + sig, f"interrupted ({signal.Signals(sig).name})")
    assert not (out / "manifest.json").exists() and not (out / "_work").exists()
    assert not (out / ".bertprep.lock").exists()


@pytest.mark.slow
def test_ctrl_c_with_worker_processes_is_one_line(tmp_path, demo_vocab):
    """Ctrl-C reaches the whole process group: the fork server and each worker's client printed a
    KeyboardInterrupt traceback, and the launcher said "a worker process died (signal 2)" (issue 53)."""
    out = tmp_path / "out"
    wiki = shared_path("pretrain", "wikipedia")
    args = ["pretraining", "--input", f"wikiextractor:{wiki}/wiki_*", "--vocab", str(demo_vocab / "vocab.txt")]
    args += ["--output", str(out), "--dupe-factor", "10", "--direct_num_workers=2"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [sys.executable, "-c", PROG, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=ctrl_c_reaches_it,
    )
    _STARTED.append(p)
    _wait_mid_run(out, p)  # the workers are running: they spill the tokenized documents
    os.killpg(p.pid, signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    done = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    assert "Traceback" not in stdout + stderr and "KeyboardInterrupt" not in stdout + stderr, stderr
    assert_clean_error(done, 130, "interrupted (Ctrl-C)")
    assert not (out / "_work").exists() and not (out / ".bertprep.lock").exists()


def test_a_beam_thread_raising_after_the_interrupt_line_stays_off_the_console(tmp_path, monkeypatch, capsys):
    """The race behind a Ctrl-C with workers: the line is printed once the run's worker log is discarded, and
    the workers' ending breaks Beam's ``beam_control_read`` stream after it. Its grpc.RpcError went to
    Python's default hook, a traceback after "Error: interrupted (Ctrl-C)" (a clean clone's run). Before the
    line the same exception goes to the worker log, after it nowhere."""
    import threading

    from bertstream.pipelines.runners import runner

    log = tmp_path / "workers.log"
    log.write_text("a worker's stderr\n")
    monkeypatch.setattr(runner, "_worker_log", [str(log)])
    monkeypatch.setattr(runner, "_default_thread_hook", threading.__excepthook__)  # a process's, not pytest's
    try:
        raise ConnectionError("Socket closed")  # as gRPC's stream raises when a worker process has ended
    except ConnectionError as e:
        args = threading.ExceptHookArgs([type(e), e, e.__traceback__, threading.current_thread()])
    runner._thread_errors_to_worker_log(args)
    assert "Socket closed" in log.read_text() and capsys.readouterr().err == ""
    runner.discard_worker_log()  # the interrupt's path, just before its one line
    assert not log.exists()
    runner._thread_errors_to_worker_log(args)
    assert capsys.readouterr().err == ""


def test_ctrl_c_before_a_command_has_its_funnel_is_one_line():
    """A Ctrl-C while a command still imports Beam (seconds) went past the funnel: click's "Aborted!", exit 1."""
    import click
    from click.testing import CliRunner

    from bertstream.cli.process import QuickExitGroup

    @click.group(cls=QuickExitGroup)
    def group() -> None:
        pass

    @group.command()
    def slow() -> None:
        raise KeyboardInterrupt  # as a Ctrl-C lands inside `import apache_beam`

    r = CliRunner().invoke(group, ["slow"])
    assert r.exit_code == 130 and r.output.strip() == "Error: interrupted (Ctrl-C); nothing was written", r.output


def test_a_worker_that_ended_on_the_same_ctrl_c_did_not_die(monkeypatch):
    """A worker ending on Ctrl-C (SIGINT, or its client's exit 130) was "a worker process died (signal 2)"."""
    import click
    from click.testing import CliRunner

    from bertstream.pipelines.runners import beam_worker, runner
    from bertstream.pipelines.runners.cli_errors import bertprep_errors

    monkeypatch.setattr(runner, "_worker_died", [runner.INTERRUPTED])

    @click.command()
    def cmd() -> None:
        with bertprep_errors():
            raise KeyboardInterrupt

    r = CliRunner().invoke(cmd, [])
    assert r.exit_code == 130 and "interrupted (Ctrl-C); no manifest was written" in r.output, r.output
    monkeypatch.setenv(beam_worker.fork_server.ENV, "/nonexistent/socket")

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(beam_worker.fork_server, "run_through_server", interrupted)
    with pytest.raises(SystemExit) as e:  # the worker's client: no traceback, the status a shell reports
        beam_worker.main()
    assert e.value.code == 130


def _shim(tmp_path: Path, package: str, error: str) -> dict[str, str]:
    """An environment where ``import package`` fails as if it were not installed."""
    d = tmp_path / "shim" / package
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(error)
    return dict(os.environ, PYTHONPATH=f"{d.parent}{os.pathsep}{REPO}", OMP_NUM_THREADS="1")


def test_missing_optional_packages_are_one_line_naming_them(tmp_path, demo_vocab, demo_shards):
    env = _shim(tmp_path, "boto3", "raise ImportError('boto3 is not installed here')")
    for args in (
        (
            "pretraining",
            "--input",
            "s3://bucket/c.txt",
            "--vocab",
            str(demo_vocab / "vocab.txt"),
            "--output",
            str(tmp_path / "o"),
        ),
        ("vocab", "--input", "s3://bucket/c.txt", "--output", str(tmp_path / "v")),
    ):
        r = subprocess.run([sys.executable, "-c", PROG, *args], capture_output=True, text=True, env=env, timeout=300)
        assert_clean_error(r, 2, "s3://", "boto3", "apache-beam[aws]")
    r = bertprep(
        "pretraining",
        "--input",
        "http://example.com/c.txt",
        "--vocab",
        str(demo_vocab / "vocab.txt"),
        "--output",
        str(tmp_path / "o"),
    )
    assert_clean_error(r, 2, "http://", "download")
    env = _shim(
        tmp_path, "matplotlib", "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')"
    )
    r = subprocess.run(
        [sys.executable, "-c", PROG, "report", str(demo_shards), "--output", str(tmp_path / "rep")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert_clean_error(r, 1, "matplotlib", "pip install matplotlib")


def test_unclear_input_messages_say_what_the_path_is(tmp_path, demo_vocab):
    d = tmp_path / "in"
    d.mkdir()
    (d / "jsonl:dump.txt").write_text('{"text": "x"}\n')
    os.mkfifo(d / "fifo")
    (d / "folder").mkdir()
    (d / "folder" / "a.txt").write_text("A sentence.\n")

    def run(inp: str) -> subprocess.CompletedProcess:
        return bertprep(
            "pretraining", "--input", inp, "--vocab", str(demo_vocab / "vocab.txt"), "--output", str(tmp_path / "o")
        )

    r = bertprep_process(  # a relative path: the process's own working folder
        "pretraining",
        "--input",
        "jsonl:dump.txt",
        "--vocab",
        str(demo_vocab / "vocab.txt"),
        "--output",
        str(tmp_path / "o"),
        cwd=d,
    )
    assert_clean_error(r, 2, "format prefix", "./jsonl:dump.txt")
    assert_clean_error(run(str(d / "fifo")), 2, "FIFO", "not a regular file")
    assert_clean_error(run(str(d / "folder")), 2, "is a folder", "folder/*")
    # Both inputs in one folder of their own: the sample is chosen by a hash of the ids below the inputs' common
    # folder, so the case is the same wherever the test runs (with the shared file beside a temporary one, the
    # ids held the temporary path, and one clean clone in a few sampled a document).
    sample = tmp_path / "sample"
    sample.mkdir()
    shutil.copy(d / "folder" / "a.txt", sample / "a.txt")
    shutil.copy(shared_path("pretrain", "sample_text.txt"), sample / "sample_text.txt")
    r = bertprep(
        "vocab",
        "--input",
        str(sample / "a.txt"),
        "--input",
        str(sample / "sample_text.txt"),
        "--sample-bytes",
        "10",
        "--output",
        str(tmp_path / "v"),
    )
    assert_clean_error(r, 2, "--sample-bytes", "too small")


def test_dataset_commands_name_the_broken_shard_and_refuse_negative_counts(tmp_path, demo_shards):
    ds = tmp_path / "ds"
    shutil.copytree(demo_shards, ds)
    shard = sorted(ds.glob("*.arrow"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert_clean_error(bertprep("report", str(ds), "--output", str(tmp_path / "rep")), 1, shard.name)
    assert_clean_error(bertprep("inspect", str(ds), "--decode", "-1"), 2, "--decode")


def test_a_full_disk_while_writing_the_vocabulary_is_one_line_and_keeps_the_earlier_one(tmp_path, bad, monkeypatch):
    import errno

    from click.testing import CliRunner

    from bertstream.pipelines.cli import main
    from bertstream.schemas.vocab import Vocab

    out = tmp_path / "voc"
    args = ["vocab", "--input", str(bad / "s.txt"), "--vocab-size", "100", "--min-frequency", "1", "--output", str(out)]
    assert CliRunner().invoke(main, args).exit_code == 0
    before = snapshot(out)

    def full(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.text()[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Vocab, "write", full)
    r = CliRunner().invoke(main, [*args, "--overwrite"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "No space left on device" in r.output and "no vocabulary was written" in r.output
    assert snapshot(out) == before  # no half-written file, the earlier vocabulary whole


@pytest.mark.parametrize("spans", ["raises", "past the end"])
def test_a_word_segmenter_that_fails_or_overruns_the_text_is_one_line(tmp_path, monkeypatch, spans):
    from click.testing import CliRunner

    from bertstream.pipelines.cli import main
    from bertstream.pipelines.pretraining import chinese_words as ws

    def load(name):
        def segment(text):
            if spans == "raises":
                raise RuntimeError("dictionary corrupt")
            return [(0, len(text) + 5)]

        return segment

    monkeypatch.setattr(ws, "load_segmenter", load)
    chinese = shared_path("pretrain", "chinese")
    vocab = shared_path("vocab", "bert-base-chinese-vocab.txt")
    text = tmp_path / "zh.txt"
    text.write_text("北京是中国的首都。\n今天天气很好。\n", encoding="utf-8")
    assert chinese.exists()
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            f"lines:{text}",
            "--vocab",
            str(vocab),
            "--output",
            str(tmp_path / "o"),
            "--whole-word-mask",
            "--word-segmenter",
            "jieba",
            "--dupe-factor",
            "1",  # (no --cased: bert-base-chinese holds no uppercase letter, and --cased is refused with it)
        ],
    )
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "--word-segmenter" in lines[0], r.output


@pytest.mark.parametrize("sig", [signal.SIGABRT, signal.SIGKILL], ids=["abort in native code", "SIGKILL"])
def test_a_run_that_dies_where_no_handler_runs_says_so_in_one_line_and_leaves_no_lock(tmp_path, demo_vocab, sig):
    """A Rust allocation failure aborts the process (exit 134): no Python handler runs, and the run left no line
    and its lock and _work folder (issue 53). The run's watcher (cli/watch.py) says it and removes both."""
    import resource

    wiki = shared_path("pretrain", "wikipedia")
    out = tmp_path / "out"
    args = ["pretraining", "--input", f"wikiextractor:{wiki}/wiki_*", "--vocab", str(demo_vocab / "vocab.txt")]

    def no_core_file() -> None:  # an abort would write one
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [sys.executable, "-c", PROG, *args, "--output", str(out), "--dupe-factor", "10"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=no_core_file,
    )
    _STARTED.append(p)
    _wait_mid_run(out, p)
    p.send_signal(sig)
    _, stderr = p.communicate(timeout=120)  # (returns once the watcher, which shares stderr, is done)
    assert p.returncode == -sig
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "ended before its run finished" in errors[0], stderr
    assert "Traceback" not in stderr
    assert not (out / ".bertprep.lock").exists() and not (out / "_work").exists()


def test_a_full_disk_that_also_stops_the_error_log_is_one_line(tmp_path):
    """Round 8: under a file-size limit (`ulimit -f 1`: a disk as full as the run's own writes found it) the
    error funnel's details log failed too, and its OSError ('File too large') replaced the one line with a
    traceback (bertprep vocab; any error the funnel logs)."""
    import resource

    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"Sentence {i} here. Another sentence there.\n" for i in range(400)))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, "-c", PROG, "vocab", "--input", str(corpus), "--output", str(tmp_path / "v")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)),
    )
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error:")]
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(errors) == 1, p.stderr
    assert "File too large" in errors[0]
