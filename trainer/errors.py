"""The trainer's own run-time error: a run cannot start or continue as asked.

Its message names the CLI flag to change (``--overwrite``, ``--max-steps``, ...), so ``berttrain`` shows it as
one ``Error:`` line; library errors (ShardError, SchemaError, ...) carry their own paths and are shown the same
way by :mod:`bertstream.trainer.cli_errors`.
"""

from __future__ import annotations


class RunError(RuntimeError):
    """A run cannot start or continue as asked; the message names the flag that decides it."""
