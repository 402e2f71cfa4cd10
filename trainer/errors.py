"""The trainer's user errors: one base class, :class:`UserError`, for every error that a user causes without a
bug (bad data, a checkpoint or ``--init`` that does not fit, a flag that a run cannot honour), which ``berttrain``
shows as one ``Error:`` line (exit 1; :mod:`bertstream.trainer.cli_errors`), never a traceback. Each names
the path or the flag to change. Bad flag values found before any work are ``bertstream.cli.errors.UsageError``
(exit 2); the schemas' errors (``SchemaError``, ``VocabError``) are the schemas' own.
"""

from __future__ import annotations


class UserError(Exception):
    """Base of the trainer's user errors: the message is the whole report (a path or a flag to change)."""


class RunError(UserError, RuntimeError):
    """A run cannot start or continue as asked; the message names the flag that decides it."""
