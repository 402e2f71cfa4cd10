"""bertprep's live line and stage summary: counts from every worker (in-process and worker processes) summed
by the launcher, redrawn on a terminal, plain lines otherwise; per-file lines only with --verbose."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from bertstream.pipelines.common import progress as P
from tests.argv import with_flags
from tests.terminal import on_terminal

LIVE = re.compile(r"\[bertprep\] read (\d+)/(\d+) files, [\d.]+/[\d.]+ MB, ([\d,]+) documents, [\d.]+ MB/s")
SUMMARY = re.compile(r"\[bertprep\] (read|groups|shards): .*, [\d.]+-[\d.]+ s$", re.M)


def _add_in_another_process(folder: str, **counts: int) -> None:
    code = f"from bertstream.pipelines.common import progress as P; P.add('read', final=True, **{counts!r})"
    env = {**os.environ, P.ENV_DIR: folder, "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def test_counts_of_every_process_are_summed_and_nothing_counts_without_a_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(P.ENV_DIR, raising=False)
    P.add("read", final=True, files=5)  # no run: nothing written anywhere
    folder = tmp_path / "progress"
    folder.mkdir()
    monkeypatch.setenv(P.ENV_DIR, str(folder))
    P.add("read", final=True, files=1, bytes=100, documents=3)
    P.add("read", final=True, files=1, bytes=50, documents=2)
    _add_in_another_process(str(folder), files=2, bytes=1000, documents=7)
    counts, times = P.collect(str(folder))
    assert (counts["read.files"], counts["read.bytes"], counts["read.documents"]) == (4, 1150, 12)
    assert set(times) == {"read"} and times["read"][0] <= times["read"][1]
    assert len(list(folder.glob("*.json"))) == 2  # one file per process


def test_a_file_range_is_counted_without_a_write_of_its_own(tmp_path, monkeypatch):
    """A write per file range was a third of a run over 100,000 one-line files (py-spy): frequent counts are
    written at most every FLUSH_S, and what is left when the bundle ends by flush(), so the summary is exact."""
    folder = tmp_path / "progress"
    folder.mkdir()
    monkeypatch.setenv(P.ENV_DIR, str(folder))
    writes: list[float] = []
    write = P._write
    monkeypatch.setattr(P, "_write", lambda f, now: writes.append(now) or write(f, now))
    monkeypatch.setattr(P, "FLUSH_S", 1e12)  # however slow the machine, no interval passes during the loop
    for _ in range(1000):
        P.add("read", files=1, bytes=10, documents=1)
    assert len(writes) <= 1  # at most the first (none if this process wrote a moment ago)
    P.flush()
    counts, _ = P.collect(str(folder))
    assert (counts["read.files"], counts["read.bytes"], counts["read.documents"]) == (1000, 10000, 1000)
    n = len(writes)
    P.flush()  # nothing new: nothing written
    assert len(writes) == n


def test_monitor_prints_a_plain_line_and_a_stage_summary_when_not_a_terminal():
    out = io.StringIO()
    with P.Monitor(files=2, input_bytes=2_000_000, shards=1, stream=out) as m:
        P.add("read", final=True, files=2, bytes=2_000_000, text=5_000_000, documents=9)
        P.add("shards", final=True, shards=1, instances=40)
        folder = m.folder
    text = out.getvalue()
    assert "\r" not in text and LIVE.search(text).groups() == ("2", "2", "9")
    assert "shards 1/1" in text and [m.group(1) for m in SUMMARY.finditer(text)] == ["read", "shards"]
    assert (
        "read: 2 files, 2.0 MB of input (5.0 MB of text), 9 documents" in text
        and "shards: 1 shards, 40 instances" in text
    )
    assert folder and not os.path.exists(folder) and P.ENV_DIR not in os.environ


def _pretraining(corpus, vocab, out, *extra: str, stderr=subprocess.PIPE) -> subprocess.Popen:
    args = ["pretraining", "--input", str(corpus / "*.txt"), "--format", "text", "--vocab", str(vocab / "vocab.txt")]
    args = with_flags([*args, "--output", str(out), "--dupe-factor", "1", "--num-shards", "2"], extra)
    return subprocess.Popen(
        [sys.executable, "-c", "from bertstream.pipelines.cli import main; main()", *args],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _documents_read(out) -> int:
    return json.loads((out / "manifest.json").read_text())["counters"]["documents_read"]


@pytest.mark.parametrize(
    "extra", [(), ("--direct_num_workers=2", "--verbose")], ids=["in-process", "2-worker-processes-verbose"]
)
def test_pretraining_shows_one_live_line_and_a_summary_per_stage(demo_corpus, demo_vocab, tmp_path, extra):
    """The live line and stage summaries; the per-file lines only with --verbose, also from worker processes
    (whose stderr is their log file)."""
    files = len(list(demo_corpus.glob("*.txt")))
    p = _pretraining(demo_corpus, demo_vocab, tmp_path / "out", *extra)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    # The summary names the runner as it ran: worker processes or this one (it said FnApiRunner for both).
    workers = " with 2 worker processes" if extra else ""
    run = re.search(rf"^  run: FnApiRunner{workers}, ([0-9.]+) s, ([0-9.]+) MB/s of input$", out, re.M)
    done = re.search(r"^done in ([0-9.]+) s: [0-9.]+ MB of input, ([0-9.]+) MB/s,", out, re.M)
    assert run and done and run.groups() == done.groups(), out  # one time and one rate, said twice alike
    last = [m.groups() for m in LIVE.finditer(err)][-1]
    assert last == (str(files), str(files), f"{_documents_read(tmp_path / 'out'):,}"), err
    assert [m.group(1) for m in SUMMARY.finditer(err)] == ["read", "groups", "shards"], err
    assert "shards: 2 shards" in err
    if "--verbose" in extra:
        assert len(re.findall(r"\[bertprep\] read /\S+\.txt: 1 documents, ", err)) == files, err
        assert err.count("wrote shard") == 2, err
    else:
        assert not re.search(r"read /\S+: ", err) and "wrote shard" not in err  # details only with --verbose


def test_on_a_terminal_the_line_is_redrawn_in_place(demo_corpus, demo_vocab, tmp_path):
    code, text = on_terminal(
        lambda fd: _pretraining(demo_corpus, demo_vocab, tmp_path / "out", "--dupe-factor", "3", stderr=fd), 160
    )
    assert code == 0, text
    redraws = text.count("\r\x1b[2K[bertprep] read ")
    # Drawn in place (carriage return, erase the line); how many times depends on the run's speed against the
    # redraw interval (a faster start-up left only the final draw), so not counted beyond one.
    assert redraws >= 1, text
    assert [m.group(1) for m in SUMMARY.finditer(text.replace("\r\n", "\n"))] == ["read", "groups", "shards"]


def test_a_compressed_file_counts_its_listed_bytes_toward_the_input_and_its_text_apart(tmp_path, monkeypatch):
    """The live line's MB add up to the run's input MB: a .gz range counts its compressed bytes (it counted the
    text it held: `read 1/1 files, 2.6/0.9 MB`), and the stage summary gives the text's MB beside them."""
    import gzip

    from bertstream.pipelines.inputs.read import FileRange, ReadSpec, _ReadRangeFn

    text = "".join(f"Sentence {i} of the first document. And its second sentence.\n" for i in range(500))
    path = tmp_path / "doc.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    folder = tmp_path / "progress"
    folder.mkdir()
    monkeypatch.setenv(P.ENV_DIR, str(folder))
    fn = _ReadRangeFn(ReadSpec())
    list(fn.process(FileRange(str(path), "sentences", "doc", size=path.stat().st_size)))
    fn.finish_bundle()
    counts, times = P.collect(str(folder))
    assert counts["read.bytes"] == path.stat().st_size < counts["read.text"] == len(text.encode())
    summary = P.stage_summary(counts, times, times["read"][0])[0]
    assert re.match(r"read: 1 files, 0\.0 MB of input \(0\.0 MB of text\), 1 documents", summary), summary
