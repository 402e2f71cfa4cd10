"""How a command-line process ends: its exit handlers run, the interpreter's teardown does not.

Once a ``bertprep`` command has returned, its files are written and closed; what is left is the interpreter
freeing every module and object (Beam, pyarrow, numba, gRPC's core), which took 0.9-1.4 s after a 300-line
run on a loaded 2-core machine: a fifth of a small command's wall time, paid for nothing. A command run as a
program (``bertprep ...``: click's standalone mode with the arguments from ``sys.argv``) therefore ends the
way the interpreter would up to that teardown: non-daemon threads joined (not after an interrupt: what they
still run is abandoned work), ``atexit`` handlers run (logging
flushed, temporary folders removed, multiprocessing children ended), standard streams flushed, then the
exit status. Called with explicit arguments (click's test runner, a command run inside another program) or
``standalone_mode=False``, the group returns or raises as any click group does.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any, NoReturn

import click


def quiet_ending() -> None:
    """From here on the command's work is done and said (or refused, or interrupted, in its one line): a Ctrl-C
    that lands in what is left (threads joined, exit handlers, the interpreter's teardown) is taken as said and
    the ending goes on, with the command's status; a second one ends the process at once (130), should a handler
    hang. Python's own handler raised ``KeyboardInterrupt`` inside the exit handler it landed in: "Exception
    ignored in atexit callback" and a traceback after the command's last line (round 8's rerun: ``berttrain
    embed`` given Ctrl-C as it ended, in torch's finalizer)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set a handler (and only it runs them)

    def again(signum: int, frame: object) -> None:
        os._exit(128 + signum)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, again)

    signal.signal(signal.SIGINT, first)


def exit_now(code: object) -> NoReturn:
    """End the process with ``code`` as ``sys.exit(code)`` would, less the interpreter's teardown."""
    quiet_ending()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    from bertstream.cli.errors import work_abandoned

    if not work_abandoned():
        for t in threading.enumerate():  # what the interpreter waits for before its exit handlers
            if t is not threading.main_thread() and not t.daemon:
                t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with the descriptor closed (`>&-`): Python has no stream for it
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(status)


def stdout_lost(e: OSError) -> bool:
    """Whether ``e`` was raised writing a command's report to standard output (``click.echo`` without ``err``),
    not by the command's own files."""
    tb = e.__traceback__
    while tb is not None:
        code, names = tb.tb_frame.f_code, tb.tb_frame.f_locals
        if code.co_name == "echo" and code.co_filename.endswith(os.path.join("click", "utils.py")):
            return names.get("err") is False
        tb = tb.tb_next
    return False


def exit_stdout_lost(e: OSError) -> NoReturn:
    """`> /dev/full`, a full disk behind `> log`, a closed pipe: the command's work is done or failed on its own;
    what is lost is its report, said in one line where it can still be read."""
    print(f"Error: cannot write to standard output: {e.strerror or e}", file=sys.stderr, flush=True)
    sys.exit(1)


class QuickExitGroup(click.Group):
    """A click group whose program run (no explicit arguments, standalone) ends with :func:`exit_now`. A
    Ctrl-C (or SIGTERM, SIGHUP) that no command's funnel took, while the command still imports its
    libraries (Beam's import alone takes seconds), ends as the funnel ends it: one line, exit 128 + the
    signal, where click printed "Aborted!" and exited 1."""

    # Whether this run is the program's (set by ``main``): only then may the command's ending set signal handlers.
    as_program = False

    def invoke(self, ctx: click.Context) -> Any:
        from bertstream.cli.errors import exit_interrupted, sigterm_as_interrupt

        try:
            with sigterm_as_interrupt(hangup=True):
                try:
                    return super().invoke(ctx)
                finally:
                    # Set before the block gives Ctrl-C back to Python: what follows is click's ending (the
                    # context closed, a refusal printed), where a Ctrl-C was click's "Aborted!", exit 1, for a
                    # command whose work was done.
                    if self.as_program:
                        quiet_ending()
        except KeyboardInterrupt as e:
            exit_interrupted(e, "nothing was written")
        except OSError as e:
            if not stdout_lost(e):
                raise
            exit_stdout_lost(e)

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        if args is not None:  # click's test runner, a command run inside another program: sys.exit as ever
            return super().main(args, prog_name, complete_var, True, **extra)
        self.as_program = True
        try:
            super().main(None, prog_name, complete_var, True, **extra)
        except SystemExit as e:  # standalone mode always ends so, success included
            exit_now(e.code)
        exit_now(0)
