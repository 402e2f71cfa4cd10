"""The interrupt funnel shared by both command lines (``bertstream.cli.errors``)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from bertstream.cli.errors import Terminated, raise_if_swallowed, sigterm_as_interrupt


class SignalledWhileCollected:
    """An object whose finalizer the signal lands in, as it lands in any ``__del__`` the collector runs."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)
        signal.sigtimedwait([], 0)  # the handler runs here, inside the finalizer


@pytest.mark.parametrize("signum, kind", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_an_interruption_a_finalizer_swallows_prints_nothing_and_is_raised_again(
    monkeypatch, ctrl_c_at_default, signum, kind
):
    # Round 9: SIGTERM to `bertprep pretraining --overwrite` as its work folder appeared was "Exception ignored
    # in" a finalizer with a traceback, and the run went on to exit 0 with its dataset published.
    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)  # what Python would print
    with sigterm_as_interrupt(hangup=True):
        SignalledWhileCollected(signum)  # collected at once: its finalizer swallows the handler's exception
        assert ignored == []
        with pytest.raises(kind):
            raise_if_swallowed()
        other = type("Unraisable", (), {"exc_value": ValueError("a finalizer's own error")})()
        sys.unraisablehook(other)
        assert ignored == [other]  # not an interruption of ours: Python's hook says it as before
    assert sys.unraisablehook == ignored.append  # put back with the block's signal handlers
