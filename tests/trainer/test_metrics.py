"""``metrics.jsonl``: what a resume (``MetricsLogger.truncate_after``) and ``plot`` (``read_metrics``) accept."""

from __future__ import annotations

import json
import os
import threading

import pytest

from bertstream.trainer.errors import RunError
from bertstream.trainer.metrics import METRICS_FILE, MetricsLogger, read_metrics


def test_a_resume_keeps_the_records_up_to_its_step_and_refuses_an_edited_log(tmp_path):
    """Issue 44, new cases: a record without an integer step ended a resume in a KeyError or TypeError traceback."""
    log = tmp_path / METRICS_FILE
    logger = MetricsLogger(tmp_path, enabled=True, tensorboard=False)
    records = [{"step": s, "loss": 1.0} for s in (1, 2, 3)]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    logger.truncate_after(2)
    assert read_metrics(tmp_path) == records[:2]
    for odd in ({"loss": 1.0}, {"step": "3"}, [1], {"step": True}):
        log.write_text(json.dumps(records[0]) + "\n" + json.dumps(odd) + "\n")
        with pytest.raises(RunError, match="record 2 has no step"):
            logger.truncate_after(2)


def test_a_log_that_is_a_fifo_or_a_link_is_refused(tmp_path):
    """A FIFO metrics.jsonl hung plot and a resume (read until someone wrote to it); a link was written through by
    a resume, into the file it names outside the run folder."""
    fifo_run, link_run = tmp_path / "fifo", tmp_path / "link"
    fifo_run.mkdir()
    fifo = fifo_run / METRICS_FILE
    os.mkfifo(fifo)
    # A writer that closes at once: were the FIFO read, the reader would get its end and the test fail, not hang.
    writer = threading.Thread(target=lambda: open(fifo, "w").close(), daemon=True)
    writer.start()
    with pytest.raises(RunError, match="not a regular file"):
        read_metrics(fifo_run)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer's open return
    writer.join()
    os.close(reader)
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 5}) + "\n")
    before = outside.read_bytes()
    link_run.mkdir()
    (link_run / METRICS_FILE).symlink_to(outside)
    with pytest.raises(RunError, match=r"is a link \(to .*outside.jsonl\)"):
        MetricsLogger(link_run, enabled=True, tensorboard=False).truncate_after(1)
    assert outside.read_bytes() == before


def test_a_resume_that_fails_while_rewriting_the_log_leaves_it_whole(tmp_path):
    """Issue 53: truncate_after rewrote metrics.jsonl in place; a full disk (here a file-size limit) mid-write
    cut the history the checkpoint covers, and the next resume went on without it."""
    import resource

    logger = MetricsLogger(tmp_path, enabled=True, tensorboard=False)
    for step in range(1, 81):
        logger.log({"step": step, "loss": 10.0 - step / 10, "note": "x" * 40})
    before = (tmp_path / METRICS_FILE).read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))  # the kept records take ~4,500 bytes
    try:
        with pytest.raises(OSError, match="File too large"):
            MetricsLogger(tmp_path, enabled=True, tensorboard=False).truncate_after(55)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert (tmp_path / METRICS_FILE).read_bytes() == before  # the old file, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == [METRICS_FILE]  # no temporary file left
    MetricsLogger(tmp_path, enabled=True, tensorboard=False).truncate_after(55)
    assert [r["step"] for r in read_metrics(tmp_path)] == list(range(1, 56))
