"""Every ``bertprep`` and ``berttrain`` command's full ``--help``, compared with the text recorded before the
issue-22 redesign (``tests/data/help_texts.json``, generated from main's code): a structural change of the
configuration must leave every flag, help sentence and default as users know them.

Regenerate (only when a flag changes on purpose): ``python -m tests.test_help_texts``."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

RECORD = Path(__file__).parent / "data" / "help_texts.json"
WIDTHS = (80, 1000)  # the usual terminal, and one wide enough that nothing wraps


def _roots() -> dict[str, click.Command]:
    from bertstream.pipelines.cli import main as bertprep
    from bertstream.trainer.cli import main as berttrain

    return {"bertprep": bertprep, "berttrain": berttrain}


def _commands(cmd: click.Command, path: list[str]):
    yield path
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            yield from _commands(cmd.commands[name], path + [name])


def help_texts() -> dict[str, str]:
    """``"bertprep task ner @80" -> its --help output`` for every command at every width."""
    out: dict[str, str] = {}
    for name, root in _roots().items():
        for path in _commands(root, [name]):
            for width in WIDTHS:
                result = CliRunner().invoke(root, [*path[1:], "--help"], prog_name=name, terminal_width=width)
                assert result.exit_code == 0, result.output
                out[f"{' '.join(path)} @{width}"] = result.output
    return out


RECORDED: dict[str, str] = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}


def test_the_same_commands_exist():
    assert sorted(help_texts()) == sorted(RECORDED)


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_help_text_is_unchanged(key):
    assert help_texts()[key] == RECORDED[key]


if __name__ == "__main__":
    RECORD.write_text(json.dumps(help_texts(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
