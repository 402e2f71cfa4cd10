"""``--version`` on both command lines: the installed distribution's version, from its metadata."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from click.testing import CliRunner


@pytest.mark.parametrize("prog", ["bertprep", "berttrain"])
def test_version_is_the_installed_distributions(prog):
    if prog == "bertprep":
        from bertstream.pipelines.cli import main
    else:
        from bertstream.trainer.cli import main
    result = CliRunner().invoke(main, ["--version"], prog_name=prog)
    assert result.exit_code == 0, result.output
    assert result.output == f"{prog} {version('bertstream')}\n"


def test_version_without_metadata_says_unknown(monkeypatch):
    from importlib import metadata

    from bertstream.cli import version as V

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert V.installed_version() == "0+unknown"
