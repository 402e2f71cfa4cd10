"""Entry point of the local multi-process Beam workers: Beam's own worker with its chatter silenced.

Beam's worker sets the root logger to INFO before it reads any option and warns about optional cloud
clients on import, so every worker would print a dozen lines; ``logging.disable`` mutes WARNING and below
whatever levels are set later. Errors still show, and our progress lines go to stderr directly.

With ``BERTPREP_WORKER_LOG`` set (``bertstream.pipelines.runners.runner.make_pipeline`` sets it), the worker's stderr goes to
that file instead: a failing bundle's traceback, logged by Beam in every worker, would bury the launcher's
one ``Error:`` line under hundreds. Progress lines still reach the console, through ``BERTPREP_CONSOLE_FD``.
"""

import logging
import os
import sys

from bertstream.pipelines.runners import fork_server

INTERRUPTED = 130  # a worker's exit status on Ctrl-C: 128 + SIGINT, as a shell reports it


def _stderr_to_log() -> None:
    log = os.environ.get("BERTPREP_WORKER_LOG")
    if not log:
        return
    os.environ["BERTPREP_CONSOLE_FD"] = str(os.dup(2))
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)


def run() -> None:
    """Beam's worker, in this process."""
    _stderr_to_log()
    logging.disable(logging.WARNING)
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


def main() -> None:
    # Forked from the launcher's warm fork server when it runs one (pipelines/runners/fork_server.py), so that
    # this process need not import Beam and start numba; else the worker runs here.
    server = os.environ.get(fork_server.ENV)
    if server:
        try:
            code = fork_server.run_through_server(server, sys.argv)
        except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the launcher says it in one line
            sys.exit(INTERRUPTED)
        if code is not None:
            sys.exit(code)
    run()


if __name__ == "__main__":
    main()
