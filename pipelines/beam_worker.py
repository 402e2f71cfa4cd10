"""Entry point of the local multi-process Beam workers: Beam's own worker with its chatter silenced.

Beam's worker sets the root logger to INFO before it reads any option and warns about optional cloud
clients on import, so every worker would print a dozen lines; ``logging.disable`` mutes WARNING and below
whatever levels are set later. Errors still show, and our progress lines go to stderr directly.
"""

import logging
import sys


def main() -> None:
    logging.disable(logging.WARNING)
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
