#!/usr/bin/env python3
"""The fine-tuning tasks' own text, labels removed, as pretraining input (task-adaptive pretraining,
Gururangan et al. 2020): what a user with little labelled data has in plenty.

    python3 scripts/recipes/task_text.py TASKS_DIR OUT_DIR [--squad-articles 0:40]

writes, in ``bertprep``'s ``sentences`` format (one sentence per line, a blank line between documents):

- ``sst2.txt``: SST-2 training phrases, 8 consecutive phrases a pseudo-document (a phrase is too short to
  pair with itself);
- ``conll.txt``: CoNLL-2003 training sentences (tokens joined by spaces), a document per ``-DOCSTART-``;
- ``mrpc.txt``: MRPC training pairs, the two sentences of a pair a document;
- ``squad.txt``: the contexts of the SQuAD articles that fine-tuning trains on (never the evaluation
  articles), a paragraph a line in ``lines`` format (segmented by the pipeline), as ``squad_contexts.txt``;
  and their questions, a paragraph's questions a document, as ``squad_questions.txt``.

Only training splits are read, so nothing of an evaluation set reaches pretraining. Each file is written
whole or not at all (a temporary name, then renamed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

PHRASES_PER_DOC = 8


def _write(path: Path, documents: Iterable[list[str]], *, one_per_line: bool = False) -> int:
    """Write ``documents`` (lists of sentences); returns how many were written."""
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as f:
        for doc in documents:
            sentences = [" ".join(s.split()) for s in doc]
            sentences = [s for s in sentences if s]
            if not sentences:
                continue
            f.write(" ".join(sentences) + "\n" if one_per_line else "\n".join(sentences) + "\n\n")
            n += 1
    os.replace(tmp, path)
    return n


def sst2(train_tsv: Path) -> Iterator[list[str]]:
    with train_tsv.open(encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)  # header: sentence, label
        phrases = [row[0] for row in rows if row]
    for i in range(0, len(phrases), PHRASES_PER_DOC):
        yield phrases[i : i + PHRASES_PER_DOC]


def conll(train_txt: Path) -> Iterator[list[str]]:
    doc: list[str] = []
    sentence: list[str] = []
    for line in train_txt.open(encoding="utf-8"):
        fields = line.split()
        if not fields:
            if sentence:
                doc.append(" ".join(sentence))
            sentence = []
        elif fields[0] == "-DOCSTART-":
            if doc:
                yield doc
            doc = []
        else:
            sentence.append(fields[0])
    if sentence:
        doc.append(" ".join(sentence))
    if doc:
        yield doc


def mrpc(train_tsv: Path) -> Iterator[list[str]]:
    with train_tsv.open(encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)  # header: Quality, #1 ID, #2 ID, #1 String, #2 String
        for row in rows:
            if len(row) == 5:
                yield [row[3], row[4]]


def squad(dev_json: Path, articles: slice) -> tuple[list[list[str]], list[list[str]]]:
    data = json.loads(dev_json.read_text(encoding="utf-8"))["data"][articles]
    paragraphs = [p for article in data for p in article["paragraphs"]]
    return [[p["context"]] for p in paragraphs], [[q["question"] for q in p["qas"]] for p in paragraphs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", type=Path, help="the shared tasks folder (sst2/, conll2003/, mrpc/, squad_v1.1/)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--squad-articles", default="0:40", help="START:END of the SQuAD articles trained on")
    args = parser.parse_args(argv)
    try:
        start, end = (int(x) for x in args.squad_articles.split(":"))
    except ValueError:
        print(f"Error: --squad-articles {args.squad_articles!r}: expected START:END", file=sys.stderr)
        return 2
    sources = {
        "sst2": args.tasks / "sst2" / "train.tsv",
        "conll": args.tasks / "conll2003" / "train.txt",
        "mrpc": args.tasks / "mrpc" / "train.tsv",
        "squad": args.tasks / "squad_v1.1" / "dev-v1.1.json",
    }
    missing = [str(p) for p in sources.values() if not p.is_file()]
    if missing:
        print(f"Error: task file(s) not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {
        "sst2": _write(args.out / "sst2.txt", sst2(sources["sst2"])),
        "conll": _write(args.out / "conll.txt", conll(sources["conll"])),
        "mrpc": _write(args.out / "mrpc.txt", mrpc(sources["mrpc"])),
    }
    contexts, questions = squad(sources["squad"], slice(start, end))
    counts["squad_contexts"] = _write(args.out / "squad_contexts.txt", contexts, one_per_line=True)
    counts["squad_questions"] = _write(args.out / "squad_questions.txt", questions)
    print("task text: " + ", ".join(f"{k} {v:,} documents" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
