"""The one configuration error of the project and its validation helper, for every component config of
``bertprep`` and ``berttrain``: ``param`` names the field, which each command line maps to its flag."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is out of range; ``param`` names the offending field (the CLI maps it to its flag)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def check(cond: bool, param: str, message: str) -> None:
    """Raise ``ConfigError(param, message)`` unless ``cond``: a message names the value it got."""
    if not cond:
        raise ConfigError(param, message)
