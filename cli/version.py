"""``--version`` of both command lines: the installed distribution's version, read from its metadata (one
number, the one ``pip`` shows), never a copy kept in the code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

DISTRIBUTION = "bertstream"


def installed_version() -> str:
    """The version ``pip`` installed (``0+unknown`` in a tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def version_option() -> Callable[[Any], Any]:
    """``--version``: ``PROG, version X`` and exit 0; the metadata is read only when the flag is given."""

    def show(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"{ctx.find_root().info_name} {installed_version()}")
            ctx.exit()

    return click.option(
        "--version",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=show,
        help="Show the installed bertstream version and exit.",
    )
