#!/usr/bin/env python3
"""The measured tables of docs/results.md, rendered from the JSON the recipes wrote, so a table never drifts from
the run it cites: each block between ``<!-- table: KIND FILE[#KEY] -->`` and ``<!-- end table -->`` is the report
script's own rendering of that file (``docs/``-relative; ``#KEY`` picks one entry of a file holding several runs).

    python scripts/tools/results_tables.py            # rewrite the blocks of docs/results.md
    python scripts/tools/results_tables.py --check    # exit 1 naming each block that differs (the test suite's check)

KIND is the report that wrote the file: ``gain`` (pretraining_gain_report's results.json), ``ablation``
(pretraining_ablation_report's ablation.json), ``sweep`` (finetune_sweep_report's sweep.json).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "recipes"))  # the reports import each other by their file names

from finetune_sweep_report import sweep_table  # noqa: E402
from pretraining_ablation_report import ablation_table  # noqa: E402
from pretraining_gain_report import gain_table  # noqa: E402

RENDER: dict[str, Callable[[dict], list[str]]] = {"gain": gain_table, "ablation": ablation_table, "sweep": sweep_table}
BLOCK = re.compile(r"(<!-- table: (\S+) (\S+) -->\n)(.*?)(<!-- end table -->)", re.S)


def render(kind: str, source: str, folder: Path) -> str:
    file, _, key = source.partition("#")
    data = json.loads((folder / file).read_text(encoding="utf-8"))
    if key:
        data = data[key]
    if kind not in RENDER:
        raise SystemExit(f"Error: table kind {kind!r} unknown (known: {', '.join(RENDER)})")
    return "\n".join(RENDER[kind](data)).strip("\n") + "\n"


def refresh(doc: Path) -> tuple[str, list[str]]:
    """The document with every block re-rendered, and the blocks that were stale."""
    stale: list[str] = []

    def one(m: re.Match) -> str:
        fresh = render(m[2], m[3], doc.parent)
        if fresh != m[4]:
            stale.append(f"{m[2]} {m[3]}")
        return m[1] + fresh + m[5]

    return BLOCK.sub(one, doc.read_text(encoding="utf-8")), stale


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("docs", nargs="*", type=Path, default=[REPO / "docs" / "results.md"])
    p.add_argument("--check", action="store_true", help="Change nothing; exit 1 if a block differs from its JSON.")
    args = p.parse_args(argv)
    code = 0
    for doc in args.docs:
        text, stale = refresh(doc)
        for block in stale:
            print(f"{doc}: table {block} differs from its JSON" if args.check else f"{doc}: table {block} rewritten")
        if stale and args.check:
            code = 1
        elif stale:
            doc.write_text(text, encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
