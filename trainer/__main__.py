"""``python -m bertstream.trainer ...`` / ``torchrun ... -m bertstream.trainer pretrain ...``: the berttrain command
line; the ``berttrain`` program runs :func:`run` too.

The command line imports torch before it parses a flag (seconds on a busy machine): a Ctrl-C meanwhile came as a
``KeyboardInterrupt`` traceback from inside torch's import, past every command's funnel. Here it is one line."""

from __future__ import annotations


def run() -> None:
    from bertstream.trainer import omp_waits

    omp_waits.bound()  # before torch is imported: its OpenMP reads the waits once, on load
    try:
        try:
            from bertstream.trainer.cli import main

            main.as_program = True
            main()
        except KeyboardInterrupt as e:  # before a command's funnel took it (a command's own ends in its one line)
            from bertstream.cli.errors import exit_interrupted

            exit_interrupted(e, "nothing was written")
    finally:  # the command has ended (click's standalone mode always ends in SystemExit): what is left is the
        # interpreter's teardown (torch's finalizers), where a Ctrl-C came as a traceback after the last line
        from bertstream.cli.process import quiet_ending

        quiet_ending()


if __name__ == "__main__":
    run()
