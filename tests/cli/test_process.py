"""A command run as a program ends without the interpreter's teardown, and loses nothing on the way out."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import click
from click.testing import CliRunner

from bertstream.cli.process import QuickExitGroup

PROGRAM = textwrap.dedent(
    """
    import atexit, sys, threading, time
    import click
    from bertstream.cli.process import QuickExitGroup

    @click.group(cls=QuickExitGroup)
    def main():
        pass

    @main.command()
    @click.argument("how")
    def end(how):
        atexit.register(lambda: print("atexit ran", flush=False))
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished", flush=False))).start()
        print("x" * 100_000, end="|")  # more than a pipe's buffer, and not flushed by the command
        if how == "status":
            sys.exit(3)
        if how == "message":
            sys.exit("a message")
        if how == "usage":
            raise click.UsageError("bad value")
        if how.startswith("ctrl-c-at-exit"):  # Ctrl-C (once, or twice) lands in an exit handler, as a run ends
            import os, signal
            def handler():
                for _ in range(int(how[-1])):
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.3)  # Python runs its handler in here
                print("handler ended", flush=False)
            atexit.register(handler)
        if how == "ctrl-c-in-click":  # Ctrl-C lands in click's own ending, the command returned (its context's close)
            import os, signal
            root = click.get_current_context().find_root()
            root.call_on_close(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.3), print("closed")))
        if how == "interrupted":  # a runner's thread still working when the command is interrupted
            threading.Thread(target=lambda: (time.sleep(3600), print("abandoned work finished"))).start()
            from bertstream.cli.errors import Terminated, exit_interrupted
            exit_interrupted(Terminated(15), "no manifest was written")

    main()
    """
)


def run(how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROGRAM, "end", how], capture_output=True, text=True, timeout=60)


def test_a_program_run_keeps_its_status_output_threads_and_exit_handlers():
    for how, status in (("ok", 0), ("status", 3), ("message", 1), ("usage", 2)):
        p = run(how)
        assert p.returncode == status, (how, p.stderr)
        assert p.stdout.startswith("x" * 100_000 + "|"), how  # the unflushed output arrived whole
        assert "thread finished" in p.stdout and "atexit ran" in p.stdout, how
        assert p.stdout.index("thread finished") < p.stdout.index(
            "atexit ran"
        )  # threads first, as the interpreter does
    assert "a message" in run("message").stderr
    assert "Error: bad value" in run("usage").stderr


def test_an_interrupted_program_ends_without_waiting_for_its_abandoned_work():
    """After its one line, an interrupted command does not wait for the threads still running its work: it waited
    for a Beam runner's bundles to run to the pipeline's end (minutes at load)."""
    p = run("interrupted")  # (the abandoned thread sleeps an hour: waited for, the run meets its 60 s guard)
    assert p.returncode == 143, p.stderr
    assert p.stderr.strip() == "Error: interrupted (SIGTERM); no manifest was written"
    assert "atexit ran" in p.stdout and "abandoned work finished" not in p.stdout


def test_with_explicit_arguments_it_is_a_plain_click_group():
    @click.group(cls=QuickExitGroup)
    def main() -> None:
        pass

    @main.command()
    def hello() -> None:
        click.echo("hello")

    result = CliRunner().invoke(main, ["hello"])  # the test process goes on: no exit here
    assert result.exit_code == 0 and result.output == "hello\n"
    assert main.main(["hello"], standalone_mode=False) is None  # the command's return value


def test_standard_output_that_cannot_be_written_is_one_line():
    # Round 7: `bertprep pretraining ... > /dev/full` (a full disk behind `> log`) wrote its dataset, then ended in
    # a 15-frame traceback from click.echo's summary, OSError: [Errno 28] No space left on device.
    program = textwrap.dedent(
        """
        import click
        from bertstream.cli.process import QuickExitGroup

        @click.group(cls=QuickExitGroup)
        def main():
            pass

        @main.command()
        def summary():
            click.echo("x" * 100_000)

        main()
        """
    )
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-c", program, "summary"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: cannot write to standard output: No space left on device"], p.stderr


def test_a_program_started_with_standard_output_closed_ends_without_a_traceback():
    # Round 8: `bertprep ... >&-` did its work, then ended in 'AttributeError: 'NoneType' object has no attribute
    # 'flush'' under two tracebacks: Python sets sys.stdout to None when descriptor 1 is closed at start.
    import os

    p = subprocess.run(
        [sys.executable, "-c", PROGRAM, "end", "status"],
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr


def test_ctrl_c_as_a_program_ends_is_taken_as_said_and_a_second_one_ends_it_at_once():
    # Round 8's rerun: Ctrl-C to `berttrain embed` as it ended (its result line printed) landed in torch's exit
    # handler: 'Exception ignored in atexit callback' and a KeyboardInterrupt traceback after the last line.
    p = run("ctrl-c-at-exit1")
    assert p.returncode == 0 and p.stderr == "", p.stderr  # the command's own status, no traceback
    assert "handler ended" in p.stdout and "atexit ran" in p.stdout  # the ending went on
    p = run("ctrl-c-at-exit2")  # a second Ctrl-C (an exit handler that hangs): ended at once, quietly
    assert p.returncode == 130 and p.stderr == "", p.stderr
    assert "handler ended" not in p.stdout


def test_ctrl_c_in_clicks_ending_after_the_command_returned_is_taken_as_said():
    # Round 8's known gap: a Ctrl-C landing in click's code after the command had returned (its context closing)
    # was click's "Aborted!", exit 1, for a command whose work was done.
    p = run("ctrl-c-in-click")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "closed" in p.stdout and "atexit ran" in p.stdout
