#!/usr/bin/env python3
"""The first N sentences of a CoNLL file, whole blocks and -DOCSTART- lines kept: the README's CoNLL-2003
training subset (``python3 scripts/recipes/conll_head.py train.txt out.txt 5000``)."""

import sys

if len(sys.argv) != 4:
    sys.exit("usage: conll_head.py IN OUT SENTENCES")
blocks, out, n, limit = open(sys.argv[1], encoding="utf-8").read().split("\n\n"), [], 0, int(sys.argv[3])
for block in blocks:
    out.append(block)
    n += bool(block.strip()) and not block.startswith("-DOCSTART-")
    if n >= limit:
        break
open(sys.argv[2], "w", encoding="utf-8").write("\n\n".join(out) + "\n")
