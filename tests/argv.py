"""Command lines built from a base and a test's own flags."""

from __future__ import annotations

from collections.abc import Sequence


def with_flags(base: Sequence[str], args: Sequence[str]) -> list[str]:
    """``base`` then ``args``, where a flag of ``args`` that ``base`` gives with a value replaces that value: a
    single-valued flag given twice is refused (both command lines), not last-wins."""
    out, rest, i = list(base), [], 0
    while i < len(args):
        if args[i] in out and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[out.index(args[i]) + 1] = args[i + 1]
            i += 2
        else:
            rest.append(args[i])
            i += 1
    return out + rest
