"""How pipeline failures reach the console: usage errors (exit 2) name the flag, input errors (exit 1) name
the file and say that no manifest was written."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from pipelines.read import InputError
from pipelines.runner import UsageError
from schemas.vocab import VocabError

_STAGE = re.compile(r" \[while running '[^']*'\]")


def input_error_in(e: BaseException) -> str | None:
    """Beam wraps worker exceptions; find our InputError's message in the chain or the text."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, InputError):
            return _STAGE.sub("", str(seen))
        seen = seen.__cause__ or seen.__context__
    text = str(e)
    marker = "InputError: "
    if marker in text:
        # Beam's "[while running 'Read/ReadFile/ParDo(_ReadFileFn)']" names a stage, which users never wrote.
        return _STAGE.sub("", text[text.rindex(marker) + len(marker) :].splitlines()[0])
    return None


def interrupted_in(e: BaseException) -> bool:
    """Ctrl-C inside a DoFn reaches us as Beam's ``RuntimeError: KeyboardInterrupt [while running ...]``."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt) or str(seen).startswith("KeyboardInterrupt"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _interrupted() -> None:
    # One line, not the traceback of every Beam thread; 130 is the shell's code for SIGINT.
    click.echo("Error: interrupted; no manifest was written", err=True)
    sys.exit(130)


@contextmanager
def pipeline_errors() -> Iterator[None]:
    try:
        yield
    except UsageError as e:
        if e.param == "beam option":
            raise click.UsageError(f"{e} (neither a bertprep option nor a Beam pipeline option)") from None
        raise click.BadParameter(str(e), param_hint=f"'--{e.param}'") from None
    except VocabError as e:
        raise click.BadParameter(str(e), param_hint="'--vocab'") from None
    except InputError as e:
        raise click.ClickException(f"{_STAGE.sub('', str(e))}; no manifest was written") from None
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        _interrupted()
    except Exception as e:
        if interrupted_in(e):
            _interrupted()
        cause = input_error_in(e)
        if cause is not None:
            raise click.ClickException(f"{cause}; no manifest was written") from None
        storage = storage_error_in(e)
        if storage is not None:
            raise click.ClickException(
                f"object store or filesystem failed: {storage}; no manifest was written"
            ) from None
        raise


# What Beam's filesystems raise when an object store (or a disk) fails under a running pipeline: its S3 client's
# own error type (not an OSError), BeamIOError from match/delete, and apitools' HttpError for gs://.
_STORAGE_ERRORS = ("S3ClientError", "BeamIOError", "HttpError", "EndpointConnectionError", "ClientError")


def storage_error_in(e: BaseException) -> str | None:
    """The first line of a filesystem or object-store failure in ``e``'s chain (its URL is in it), else None."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError) or type(seen).__name__ in _STORAGE_ERRORS:
            first = seen.args[0] if seen.args and isinstance(seen.args[0], str) else str(seen)
            return f"{type(seen).__name__}: {first.splitlines()[0] if first else first}"
        seen = seen.__cause__ or seen.__context__
    return None
