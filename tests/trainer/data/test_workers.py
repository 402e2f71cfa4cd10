"""A DataLoader worker does not print the main process's leaving as its own traceback."""

from __future__ import annotations

import sys

from bertstream.trainer.data.workers import quiet_resource_sharer


def _raised_in(filename: str, error: type[BaseException]):
    try:
        exec(compile(f"raise {error.__name__}('peer')", filename, "exec"))
    except BaseException:
        return sys.exc_info()
    raise AssertionError("nothing raised")


def test_a_reset_hand_off_of_the_resource_sharer_is_not_printed(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *info: seen.append(info[0]))
    quiet_resource_sharer()  # not quiet_worker_init: its blocked SIGTERM would outlive the test in pytest's process
    sys.excepthook(*_raised_in("/usr/lib/python3.11/multiprocessing/resource_sharer.py", ConnectionResetError))
    assert seen == []
    sys.excepthook(*_raised_in("/work/trainer/data/reader.py", ConnectionResetError))  # another origin
    sys.excepthook(*_raised_in("/usr/lib/python3.11/multiprocessing/resource_sharer.py", ValueError))  # another error
    assert seen == [ConnectionResetError, ValueError]


def test_this_process_still_hears_sigterm():
    """The trainers this suite starts inherit its signal mask: a blocked SIGTERM here made one hang 120 s."""
    import signal

    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
