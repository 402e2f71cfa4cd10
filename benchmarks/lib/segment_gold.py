"""Gold sentence boundaries for the segmenter, built from shared text whose sentences are known.

Three sources, read in place from ``<repo>/../shared/data``:

``sample_text``
    ``pretrain/sample_text.txt`` (BERT's sample: one sentence per line, blank line between documents).
    The file breaks its own convention twice, putting two sentences on one line; those two lines are
    split at the second sentence (``_SAMPLE_TEXT_SPLITS``, checked to occur exactly once) -- a gold
    correction that *adds* two boundaries the segmenter must find, not a removal. The remaining lines of
    a document are joined with one space into paragraphs of 2-6 lines.
``mrpc``
    ``tasks/mrpc/{train,dev,test}.tsv`` columns ``#1 String`` and ``#2 String`` (Reuters-style news),
    deduplicated in file order, joined with one space into paragraphs of 2-6 consecutive sentences.
``conll``
    ``tasks/conll2003/{train,valid,test}.txt`` sentences, detokenized (``detokenize``), joined with one
    space into one paragraph per ``-DOCSTART-`` document.

Paragraph sizes come from ``random.Random(seed)`` per source (default seed 0), so the gold is the
same on every run; a trailing chunk may hold fewer than 2 sentences.

Eligibility rule, applied identically to every sentence of every source before joining. A sentence is
kept iff all three hold, otherwise it is left out (never merged, never edited):

E3  it contains a letter or digit (CoNLL has "sentences" that are only punctuation: rules such as
    ``---``, ``*``, a lone ``.`` or ``"``).
E1  its last non-space characters are a run of ``.``, ``!`` or ``?`` optionally followed by closing
    quotes/brackets (``" ' ” ’ ) ]``). Without a terminator the boundary after it cannot be detected:
    CoNLL headlines, bylines and datelines ("SOCCER - JAPAN GET LUCKY WIN", "Peter Blackburn",
    "LONDON 1996-08-30"), sports and financial tables, lines ending in ``:`` or ``;``.
E2  its first letter or digit is not a lowercase letter. Such "sentences" are continuations of a line
    that the source split mid-sentence (CoNLL: "Results of European Super League" / "rugby league
    matches on Saturday :"; sample_text: "... apish guide;" / "but the novel roar ..."); no segmenter
    should start a sentence there.

A removed sentence is counted under the first rule it breaks, in the order E3, E1, E2. On the shared
data as shipped (``python benchmarks/segmenter_eval.py`` prints the same counts):

===========  =========  ===========================  ======  ==========  ==========
source       sentences  removed (E3 / E1 / E2)       kept    paragraphs  boundaries
===========  =========  ===========================  ======  ==========  ==========
sample_text         33  7 (0 / 4 / 3)                    26           8          18
mrpc             10944  9 (0 / 9 / 0)                 10935        2744        8191
conll            20744  9872 (62 / 9702 / 108)        10872        1393        9479
===========  =========  ===========================  ======  ==========  ==========

sample_text E1: the Unicode test line (no terminator) and three lines ending in ``;``; E2: the three
lines continuing them. mrpc E1: strings ending in a quote detached by a space (``he vowed. "``).
conll E1 by last character: digit 6136 (scores, tables, datelines), letter 2207 (headlines, bylines),
``:`` 524, ``)`` 520, ``-`` 145, ``,`` 144, other 26.

Known noise kept in the gold (no rule removes it): CoNLL's own sentence splitter cut after some
abbreviations that are mid-sentence in the Reuters text ("Massachusetts Gov." / "William Weld asked",
"on Sept." / "17 will be"), and a few MRPC strings hold two sentences; both count against any
segmenter that gets them right.

A paragraph's gold boundaries are the character offsets where sentences 2..n start; scoring compares
them with the start offsets of spans 2..n of a segmenter (``boundary_counts``).
"""

from __future__ import annotations

import csv
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

Paragraph = tuple[str, tuple[int, ...]]  # (text, start offsets of sentences 2..n)

# Two lines of sample_text.txt hold two sentences; "|" marks where the second one starts.
_SAMPLE_TEXT_SPLITS = (
    "the hog-bucket itself. |Well, after all, I will show you",
    "this basket of fruit?' |And the little man jumped up",
)

_E1_END = re.compile(r"[.!?]+[\"'”’)\]]*\s*\Z")
_FIRST_ALNUM = re.compile(r"[^\W_]")


def shared_data_dir() -> Path:
    """``<repo>/../shared/data``: the read-only shared data beside the repository root."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


@dataclass(frozen=True, slots=True)
class GoldSource:
    """One source's gold paragraphs and what the eligibility rule removed from it."""

    name: str
    paragraphs: list[Paragraph]
    total: int
    removed: dict[str, int] = field(default_factory=dict)  # rule ("E1"/"E2"/"E3") -> sentences

    @property
    def kept(self) -> int:
        return self.total - sum(self.removed.values())

    @property
    def boundaries(self) -> int:
        return sum(len(b) for _, b in self.paragraphs)


def ineligible_rule(sentence: str) -> str | None:
    """The first eligibility rule ``sentence`` breaks (E3, E1, E2 in that order), or None if kept."""
    first = _FIRST_ALNUM.search(sentence)
    if first is None:
        return "E3"
    if not _E1_END.search(sentence):
        return "E1"
    if first.group().islower():
        return "E2"
    return None


def join_paragraph(sentences: Sequence[str]) -> Paragraph:
    """Join sentences with one space; the gold boundaries are where sentences 2..n start."""
    starts, pos = [], 0
    for i, s in enumerate(sentences):
        if i:
            starts.append(pos)
        pos += len(s) + 1
    return " ".join(sentences), tuple(starts)


def _filter(sentences: Iterable[str], removed: dict[str, int]) -> list[str]:
    kept = []
    for s in sentences:
        rule = ineligible_rule(s)
        if rule is None:
            kept.append(s)
        else:
            removed[rule] = removed.get(rule, 0) + 1
    return kept


def _chunks(items: Sequence[str], rng: random.Random, lo: int = 2, hi: int = 6) -> list[list[str]]:
    out, i = [], 0
    while i < len(items):
        k = rng.randint(lo, hi)
        out.append(list(items[i : i + k]))
        i += k
    return out


def sample_text_gold(data_dir: Path, seed: int = 0) -> GoldSource:
    text = (data_dir / "pretrain" / "sample_text.txt").read_text(encoding="utf-8")
    documents: list[list[str]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if line:
            documents[-1].append(line)
        elif documents[-1]:
            documents.append([])
    documents = [d for d in documents if d]
    splits = {s.replace("|", ""): s.index("|") for s in _SAMPLE_TEXT_SPLITS}
    found = dict.fromkeys(splits, 0)
    rng, removed, paragraphs, total = random.Random(seed), {}, [], 0
    for doc in documents:
        sentences = []
        for line in doc:
            for ctx, cut in splits.items():
                at = line.find(ctx)
                if at >= 0:
                    found[ctx] += 1
                    sentences.append(line[: at + cut].rstrip())
                    line = line[at + cut :]
            sentences.append(line)
        total += len(sentences)
        paragraphs += [join_paragraph(c) for c in _chunks(_filter(sentences, removed), rng)]
    if any(n != 1 for n in found.values()):
        raise ValueError(f"sample_text.txt changed: split contexts found {found}, expected each once")
    return GoldSource("sample_text", paragraphs, total, removed)


def mrpc_sentences(data_dir: Path) -> list[str]:
    """Distinct MRPC sentences in file order (train, dev, test; #1 then #2 of each row)."""
    seen: dict[str, None] = {}
    for split in ("train", "dev", "test"):
        path = data_dir / "tasks" / "mrpc" / f"{split}.tsv"
        with path.open(encoding="utf-8-sig", newline="") as f:
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = next(rows)
            if header[3:5] != ["#1 String", "#2 String"]:
                raise ValueError(f"{path}: unexpected header {header!r}")
            for n, row in enumerate(rows, start=2):
                if not row:
                    continue
                if len(row) != 5:
                    raise ValueError(f"{path}:{n}: expected 5 tab-separated fields, got {len(row)}")
                for s in (row[3].strip(), row[4].strip()):
                    if s:
                        seen.setdefault(s, None)
    return list(seen)


def mrpc_gold(data_dir: Path, seed: int = 0) -> GoldSource:
    sentences = mrpc_sentences(data_dir)
    removed: dict[str, int] = {}
    kept = _filter(sentences, removed)
    paragraphs = [join_paragraph(c) for c in _chunks(kept, random.Random(seed))]
    return GoldSource("mrpc", paragraphs, len(sentences), removed)


# Penn-Treebank-style tokens that attach to the previous token.
_ATTACH_LEFT = frozenset(
    {",", ".", ";", ":", "!", "?", "%", ")", "]", "}", "...", "'", "n't", "N'T"}
    | {p + s for p in ("'",) for s in ("s", "S", "re", "RE", "ve", "VE", "ll", "LL", "m", "M", "d", "D")}
)
_ATTACH_RIGHT = frozenset({"(", "[", "{", "#"})


def detokenize(tokens: Sequence[str]) -> str:
    """Join CoNLL tokens into running text.

    Punctuation, clitics (``'s``, ``n't``) and closing brackets attach left; opening brackets and
    currency symbols (``$``, ``C$``, ``US$``) attach right. Double quotes alternate open/close within
    a sentence, except that a quote first in the sentence opens and one last in it closes.
    """
    out: list[str] = []
    glue_next = False  # the previous token attaches to the next one
    quote_open = False
    last = len(tokens) - 1
    for i, tok in enumerate(tokens):
        if tok == '"':
            opening = i == 0 or (i != last and not quote_open)
            quote_open = opening
            if opening:
                if out and not glue_next:
                    out.append(" ")
                out.append(tok)
                glue_next = True
            else:
                out.append(tok)
                glue_next = False
            continue
        if out and not glue_next and not (tok in _ATTACH_LEFT and i > 0):
            out.append(" ")
        out.append(tok)
        glue_next = tok in _ATTACH_RIGHT or (tok.endswith("$") and len(tok) <= 3)
    return "".join(out)


def conll_documents(data_dir: Path) -> list[list[list[str]]]:
    """CoNLL-2003 documents (train, valid, test) as lists of token lists."""
    docs: list[list[list[str]]] = []
    for split in ("train", "valid", "test"):
        path = data_dir / "tasks" / "conll2003" / f"{split}.txt"
        sentence: list[str] = []
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                line = line.strip()
                if not line or line.startswith("-DOCSTART-"):
                    if sentence:
                        if not docs:
                            raise ValueError(f"{path}:{n}: sentence before the first -DOCSTART-")
                        docs[-1].append(sentence)
                        sentence = []
                    if line:
                        docs.append([])
                    continue
                parts = line.split(" ")
                if len(parts) != 4:
                    raise ValueError(f"{path}:{n}: expected 'token POS chunk NER', got {line!r}")
                sentence.append(parts[0])
        if sentence:
            docs[-1].append(sentence)
    return docs


def conll_gold(data_dir: Path) -> GoldSource:
    removed: dict[str, int] = {}
    paragraphs, total = [], 0
    for doc in conll_documents(data_dir):
        sentences = [detokenize(t) for t in doc]
        total += len(sentences)
        kept = _filter(sentences, removed)
        if kept:
            paragraphs.append(join_paragraph(kept))
    return GoldSource("conll", paragraphs, total, removed)


def all_gold(data_dir: Path | None = None) -> list[GoldSource]:
    d = shared_data_dir() if data_dir is None else data_dir
    return [sample_text_gold(d), mrpc_gold(d), conll_gold(d)]


@dataclass(frozen=True, slots=True)
class Counts:
    """Boundary matches: true positives, false positives, false negatives."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn)

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def predicted_boundaries(spans: Sequence[tuple[int, int]]) -> set[int]:
    return {s for s, _ in spans[1:]}


def boundary_counts(spans_fn: Callable[[str], Sequence[tuple[int, int]]], paragraphs: Iterable[Paragraph]) -> Counts:
    """Score a segmenter that returns sentence spans against gold boundary offsets."""
    tp = fp = fn = 0
    for text, gold in paragraphs:
        pred = predicted_boundaries(spans_fn(text))
        g = set(gold)
        tp += len(pred & g)
        fp += len(pred - g)
        fn += len(g - pred)
    return Counts(tp, fp, fn)
