"""The console progress of a training loop (``pretrain`` and ``finetune`` share it), on rank 0 only.

On a terminal it is tqdm's bar, as ``transformers`` and ``accelerate`` show it: step N/total, elapsed, ETA and
rate, with the latest logged figures (loss, ...) after it. When stderr is not a terminal (CI, a log file,
``nohup``) a bar would be a stream of carriage returns, so every logged step prints one plain line instead,
with the same facts: ``step 50/600 (8%), 1.52 step/s, elapsed 0:33, ETA 6:02: loss 7.1234 ...``. So does a
terminal of no width (a pseudo-terminal left at 0x0 by ``script`` or some ``docker exec -t``): tqdm fits its bar
to 0 columns there and draws nothing at all.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

_active: Any = None  # the tqdm bar being drawn, if any: log lines go through tqdm.write so as not to tear it


def write(line: str, stream: TextIO | None = None) -> None:
    """One line on stderr, above the bar when one is drawn."""
    stream = stream or sys.stderr
    if _active is not None:
        from tqdm import tqdm

        tqdm.write(line, file=stream)
    else:
        # One write, the newline included: print() writes the text and the newline separately, and torch's
        # SIGCHLD handler (a killed DataLoader worker) can raise between them, gluing the Error line to it.
        stream.write(line + "\n")
        stream.flush()


def drawable(stream: TextIO) -> bool:
    """Whether a bar can be drawn on ``stream``: a terminal that reports a width (``COLUMNS`` does not count:
    tqdm asks the terminal itself)."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (OSError, ValueError):  # no file descriptor (a StringIO), or a closed one
        return False


def clock(seconds: float) -> str:
    """``0:33``, ``6:02``, ``1:02:03``: tqdm's own notation, so both modes read alike."""
    s = int(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class Progress:
    """Steps ``initial..total`` of one run. ``enabled`` is false on every rank but 0: nothing is printed there.
    ``interactive`` defaults to whether ``stream`` (stderr) is a terminal with a width."""

    def __init__(
        self,
        total: int,
        initial: int = 0,
        *,
        enabled: bool,
        desc: str = "train",
        stream: TextIO | None = None,
        interactive: bool | None = None,
    ) -> None:
        global _active
        self.total, self.step, self.enabled = total, initial, enabled
        self.stream = stream or sys.stderr
        self.interactive = enabled and (drawable(self.stream) if interactive is None else interactive)
        self._initial, self._t0 = initial, time.monotonic()
        self._bar = None
        if self.interactive:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True, file=self.stream)
            _active = self._bar

    def update(self, n: int = 1) -> None:
        self.step += n
        if self._bar is not None:
            self._bar.update(n)

    def line(self) -> str:
        """Where the run is: ``step 50/600 (8%), 1.52 step/s, elapsed 0:33, ETA 6:02`` (rate and ETA over the
        steps of this process, so a resumed run's do not count the restored ones)."""
        elapsed = time.monotonic() - self._t0
        done = self.step - self._initial
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = clock((self.total - self.step) / rate) if rate > 0 else "?"
        pct = 100 * self.step // max(self.total, 1)
        return f"step {self.step}/{self.total} ({pct}%), {rate:.3g} step/s, elapsed {clock(elapsed)}, ETA {eta}"

    def show(self, figures: str, **postfix: str) -> None:
        """A logged step's ``figures``: after the bar (``postfix``, short), or as a plain line."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix(postfix, refresh=True)
        else:
            write(f"[berttrain] {self.line()}: {figures}", self.stream)

    def close(self) -> None:
        global _active
        if self._bar is not None:
            self._bar.close()
            if _active is self._bar:
                _active = None
            self._bar = None
