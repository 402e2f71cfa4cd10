"""The training console: tqdm on a terminal, plain periodic lines otherwise, rank 0 only (the two-process
checks are in the gloo tests of pretrain/test_loop.py and finetune/test_loop.py)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time

import pytest

from bertstream.trainer.progress import Progress, clock, drawable
from tests.terminal import on_terminal, sized_pty

# step N/total (pct), rate, elapsed, ETA, then the logged figures
LINE = re.compile(r"\[berttrain\] step (\d+)/(\d+) \((\d+)%\), [\d.e+]+ step/s, elapsed \d+:\d\d, ETA (\d+:\d\d|\?): ")


def test_plain_lines_when_not_a_terminal_and_nothing_when_disabled():
    out = io.StringIO()  # not a tty
    bar = Progress(10, 2, enabled=True, stream=out)
    assert not bar.interactive
    for _ in range(3):
        bar.update(1)
        time.sleep(0.01)
    bar.show("loss 1.2345", loss="1.23")
    bar.close()
    m = LINE.match(out.getvalue())
    assert m, out.getvalue()
    assert m.groups()[:3] == ("5", "10", "50") and out.getvalue().rstrip().endswith("loss 1.2345")
    assert m.group(4) != "?"  # 3 steps in this process: a rate, so an ETA

    quiet = io.StringIO()
    other_rank = Progress(10, enabled=False, stream=quiet, interactive=True)
    other_rank.update(5)
    other_rank.show("loss 1.0", loss="1.0")
    other_rank.close()
    assert quiet.getvalue() == ""


def test_clock_reads_as_tqdm_writes_it():
    assert (clock(5), clock(362), clock(3723)) == ("0:05", "6:02", "1:02:03")


def _pretrain_args(data, out) -> list[str]:
    return [
        *("pretrain", "--data", str(data), "--output", str(out), "--batch-size", "4", "--max-steps", "4"),
        *("--log-every", "2", "--checkpoint-every", "100", "--num-workers", "0", "--no-tensorboard"),
    ]


def test_pretrain_prints_progress_lines_to_a_pipe(demo_shards, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bertstream.trainer", *_pretrain_args(demo_shards, tmp_path / "run")],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    lines = [m.groups() for m in map(LINE.match, run.stderr.splitlines()) if m]
    assert [g[:3] for g in lines] == [("2", "4", "50"), ("4", "4", "100")], run.stderr
    assert "\r" not in run.stderr  # no bar redraws in a log file
    assert re.search(r"step 2/4 .*: loss \d+\.\d+ mlm_acc", run.stderr)
    assert run.stdout.count("trained to step 4") == 1


@pytest.mark.parametrize(("columns", "bar"), [(80, True), (0, False)])
def test_a_bar_only_on_a_terminal_that_has_a_width(columns, bar):
    with sized_pty(columns) as term:
        assert drawable(term) is bar
        shown = Progress(10, enabled=True, stream=term)
        assert shown.interactive is bar
        shown.close()


def _pretrain_on_terminal(data, out, columns: int) -> tuple[int, str, bytes]:
    """A short pretraining run with stderr on a terminal of ``columns`` columns: exit code, what the terminal
    got, stdout."""
    started: list[subprocess.Popen] = []

    def start(fd: int) -> subprocess.Popen:
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "bertstream.trainer", *_pretrain_args(data, out)],
                env={**os.environ, "OMP_NUM_THREADS": "1"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=fd,
            )
        )
        return started[0]

    code, text = on_terminal(start, columns)
    stdout = started[0].stdout
    assert stdout is not None
    return code, text, stdout.read()


def test_pretrain_draws_a_tqdm_bar_on_a_terminal(demo_shards, tmp_path):
    code, text, stdout = _pretrain_on_terminal(demo_shards, tmp_path / "run", 120)  # a terminal of 120 columns
    assert code == 0, text
    assert re.search(r"pretrain: 100%\|.*\| 4/4 \[", text), text  # tqdm's bar, at its end
    assert "loss=" in text and "mlm_acc=" in text  # the latest logged figures beside it
    assert not LINE.search(text)  # no plain lines on a terminal
    assert b"trained to step 4" in stdout


def test_a_terminal_of_no_width_gets_the_plain_lines(demo_shards, tmp_path):
    # `script` and some `docker exec -t` leave the pseudo-terminal at 0x0: a tqdm bar of 0 columns draws nothing
    code, text, stdout = _pretrain_on_terminal(demo_shards, tmp_path / "run", 0)
    assert code == 0, text
    lines = [m.groups() for m in map(LINE.search, text.splitlines()) if m]
    assert [g[:3] for g in lines] == [("2", "4", "50"), ("4", "4", "100")], text
    assert "pretrain:" not in text and "loss=" not in text  # no bar, not even an empty one
    assert b"trained to step 4" in stdout
