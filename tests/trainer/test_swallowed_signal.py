"""A Ctrl-C or SIGTERM whose exception a library swallows still stops the run (issue 53): pyarrow's pandas shim
imports pandas lazily under a bare ``except:``, and a SIGTERM landing in that import during the first
evaluation (or the first step) was lost: the run trained on and exited 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from bertstream.cli.errors import Terminated, raise_if_swallowed, sigterm_as_interrupt
from bertstream.trainer import checkpoint as ckpt
from tests.trainer.test_run_safety import run, small_dataset

# A fresh interpreter (pyarrow tries its pandas import once per process): the signal lands inside that import.
SWALLOWED_IN_PYARROW = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa
    from bertstream.cli.errors import Terminated, raise_if_swallowed, sigterm_as_interrupt

    # A list column, as the shards hold, built from buffers (pa.array of NumPy input imports pandas already).
    values = pa.Array.from_buffers(pa.int64(), 5, [None, pa.py_buffer(bytes(40))])
    offsets = pa.Array.from_buffers(pa.int32(), 3, [None, pa.py_buffer(bytes([0, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0]))])
    column = pa.ListArray.from_arrays(offsets, values)
    assert "pandas" not in sys.modules
    class SignalDuringImport:
        def find_spec(self, name, path=None, target=None):
            if name == "pandas":
                print("SIGTERM during import pandas", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)  # the handler raises Terminated right here
            return None
    with sigterm_as_interrupt():
        sys.meta_path.insert(0, SignalDuringImport())
        column.to_numpy(zero_copy_only=False)
        print("pyarrow swallowed the interruption", flush=True)
        try:
            raise_if_swallowed()
        except Terminated:
            print("raised again")
    """
)


def test_pyarrow_swallows_a_signal_in_its_lazy_import_and_it_is_raised_again():
    done = subprocess.run([sys.executable, "-c", SWALLOWED_IN_PYARROW], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == [
        "SIGTERM during import pandas",
        "pyarrow swallowed the interruption",
        "raised again",
    ], done.stderr


@pytest.mark.parametrize("signum, kind", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_swallowed_interruption_is_raised_again_and_forgotten_after_the_block(signum, kind, ctrl_c_at_default):
    with sigterm_as_interrupt():
        raise_if_swallowed()  # nothing received: nothing raised
        try:
            os.kill(os.getpid(), signum)
            signal.sigtimedwait([], 0) if hasattr(signal, "sigtimedwait") else None  # let the handler run
        except BaseException:  # noqa: BLE001 - what the library does
            pass
        with pytest.raises(kind):
            raise_if_swallowed()
    raise_if_swallowed()  # another command's block starts afresh


def test_a_run_whose_interruption_was_swallowed_stops_at_the_step(tmp_path, monkeypatch):
    from bertstream.trainer.pretrain import loop

    data = small_dataset(tmp_path / "ds")
    counts = loop.step_counts
    calls = []

    def swallowing(micro, info):  # a library call that loses the signal's exception, at step 3
        calls.append(1)
        if len(calls) == 3:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                signal.sigtimedwait([], 0)
            except BaseException:  # noqa: BLE001
                pass
        return counts(micro, info)

    monkeypatch.setattr(loop, "step_counts", swallowing)
    with sigterm_as_interrupt(), pytest.raises(Terminated):
        run(data, tmp_path / "run", max_steps=40, checkpoint_every=2)
    assert len(calls) == 3  # not a step more
    assert [c.name for c in ckpt.list_checkpoints(tmp_path / "run")] == ["step-0000002"]
