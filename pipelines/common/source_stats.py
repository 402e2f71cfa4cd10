"""What the tokenizer records for ``bertprep report``: documents, tokens and ``[UNK]`` per input source, and the
words that became ``[UNK]``.

A *source*, where a run has several ``--input``s, is one ``--input``: named by the folder that holds its files
below the common folder of all inputs (``--input data/wiki --input data/books/a.txt`` -> ``wiki``,
``books/a.txt``), or, where one input spans that whole folder, by the input's own last name (:func:`source_table`);
two inputs never merge under a parent folder's name. A run of one ``--input`` is broken down by what it holds: the
first component of each document's name below the common folder (``AA/wiki_00`` -> ``AA``; a file at the top is
a source of its own). There are at most as many sources as input files, whatever the number of documents. The per-source figures are counters: additive, so
exact on any runner.

The ``[UNK]`` words are only visible before tokenization: WordPiece turns a whole word it cannot split into one
``[UNK]``, and the shards keep the id, not the word. The tokenizer reads the words back (:class:`UnkWordReader`)
and the pipeline counts them exactly while the corpus holds at most :data:`CAPACITY` distinct ``[UNK]`` words
(the usual case). Beyond that it keeps a sample of the distinct words chosen by a stable hash (half of them, a
quarter, ... as many as fit), each with its exact count, the same on any runner; the manifest states the fraction.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from tokenizers import Tokenizer

UNK_TOKENS = "unk_tokens"
SOURCE_DOCUMENTS = "source_documents."
SOURCE_TOKENS = "source_tokens."
SOURCE_UNK_TOKENS = "source_unk_tokens."
_PREFIXES = {SOURCE_DOCUMENTS: "documents", SOURCE_TOKENS: "tokens", SOURCE_UNK_TOKENS: "unk_tokens"}

# Distinct [UNK] words counted (a few hundred KB at most) and how many the manifest lists.
CAPACITY = 4096
TOP = 50


# (name prefix, source) per --input, longest prefix first: a document's source is that of the first prefix its
# name lies under ("" lies over every name).
SourceTable = tuple[tuple[str, str], ...]


def source_table(inputs: Iterable[tuple[str, str]]) -> SourceTable:
    """The sources of a run's ``(file name below the common folder, the --input that listed it)`` pairs: per
    input, the deepest folder holding its files (a lone file: its name), or, where that is the common folder
    itself, the input's last path component without its format prefix and wildcards. One input: no table (its
    documents' first name components are the sources)."""
    by_input: dict[str, list[str]] = {}
    for name, given in inputs:
        by_input.setdefault(given, []).append(name)
    if len(by_input) < 2:
        return ()
    table: dict[str, str] = {}
    for given, names in by_input.items():
        prefix = names[0] if len(names) == 1 else _common_folder(names)
        table.setdefault(prefix, prefix or _last_name(given))
    return tuple(sorted(table.items(), key=lambda kv: (-len(kv[0]), kv[0])))


def _common_folder(names: list[str]) -> str:
    parts = [n.split("/")[:-1] for n in names]
    common = 0
    while all(len(p) > common and p[common] == parts[0][common] for p in parts):
        common += 1
    return "/".join(parts[0][:common])


def _last_name(given: str) -> str:
    """``text:corpus/wiki/*`` -> ``wiki``: the input as the user named it, short."""
    head, sep, rest = given.partition(":")
    if sep and not rest.startswith("//") and "/" not in head:  # a format prefix, not a URL's scheme
        given = rest
    literal = [c for c in given.rstrip("/").split("/") if c and not any(ch in c for ch in "*?[{")]
    return literal[-1] if literal else given


def source_of(doc_id: str, table: SourceTable = ()) -> str:
    """``wiki/AA/wiki_00:1234`` -> the source of the input it came from in ``table``; without one, the first
    component of its name (``wiki``; ``a.txt`` -> ``a.txt``). Document ids are ``name`` or ``name:offset``."""
    name, sep, tail = doc_id.rpartition(":")
    if sep and tail.isdigit():
        doc_id = name
    for prefix, source in table:
        if not prefix or doc_id == prefix or doc_id.startswith(prefix + "/"):
            return source
    return doc_id.split("/", 1)[0]


def count_document(counters: Counter, doc_id: str, tokens: int, unk: int, table: SourceTable = ()) -> None:
    source = source_of(doc_id, table)
    counters[SOURCE_DOCUMENTS + source] += 1
    counters[SOURCE_TOKENS + source] += tokens
    if unk:
        counters[UNK_TOKENS] += unk
        counters[SOURCE_UNK_TOKENS + source] += unk


def without_sources(counters: Mapping[str, int]) -> dict[str, int]:
    """``counters`` less the per-source ones: what Beam's metrics mirror. One metric per source grew the
    runner's metrics (and every bundle's report) with the file count; the manifest holds them, bounded."""
    return {k: v for k, v in counters.items() if not k.startswith(tuple(_PREFIXES))}


# Sources the manifest lists one by one; the rest are summed as OTHER_SOURCES (100,000 one-line files at the top
# held three counters each: the manifest, and every reader of it, grew with the file count).
MAX_SOURCES = 64
OTHER_SOURCES = "(other sources)"


def bounded_sources(counters: Mapping[str, int], limit: int = MAX_SOURCES) -> dict[str, int]:
    """``counters`` with at most ``limit`` sources: the ``limit - 1`` with the most tokens (ties by name) kept,
    the others summed under :data:`OTHER_SOURCES`. Chosen on the final sums: the same on any runner."""
    table = per_source(counters)
    if len(table) <= limit:
        return dict(counters)
    ranked = sorted(table, key=lambda name: (-table[name]["tokens"], name))
    keep = set(ranked[: limit - 1])
    out = {k: v for k, v in counters.items() if not k.startswith(tuple(_PREFIXES))}
    for name, row in sorted(table.items()):
        target = name if name in keep else OTHER_SOURCES
        for prefix, field in _PREFIXES.items():
            if row[field] or prefix != SOURCE_UNK_TOKENS:  # as count_document: [UNK] only when there is one
                out[prefix + target] = out.get(prefix + target, 0) + row[field]
    return dict(sorted(out.items()))


def per_source(counters: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``{source: {"documents", "tokens", "unk_tokens"}}`` from the manifest's counters (empty for a dataset
    made before they were recorded)."""
    out: dict[str, dict[str, int]] = {}
    for key, value in counters.items():
        for prefix, field in _PREFIXES.items():
            if key.startswith(prefix):
                row = out.setdefault(key[len(prefix) :], {"documents": 0, "tokens": 0, "unk_tokens": 0})
                row[field] = value
    return out


class UnkWordReader:
    """Reads back the words a WordPiece tokenizer turned into ``[UNK]`` (as it saw them: normalized).

    Encoding without offsets is what makes tokenization fast, so the words come from the ids: every token that
    is not a ``##`` continuation starts a word, and the k-th word is the k-th word of the pre-tokenizer. Only
    sentences that hold an ``[UNK]`` are pre-tokenized again.
    """

    UNRECOVERED = "<unrecovered>"  # a sentence whose words and ids do not line up (a non-WordPiece tokenizer.json)

    def __init__(self, tokenizer: Tokenizer, tokens: Sequence[str], unk_id: int) -> None:
        prefix = getattr(tokenizer.model, "continuing_subword_prefix", None)
        self.starts_word = None
        if prefix:
            # Added tokens may lie past the vocabulary: each is a word of its own.
            self.starts_word = np.ones(max(len(tokens), tokenizer.get_vocab_size(with_added_tokens=True)), bool)
            self.starts_word[: len(tokens)] = [not t.startswith(prefix) for t in tokens]
        self.normalizer = tokenizer.normalizer
        self.pre_tokenizer = tokenizer.pre_tokenizer
        self.unk_id = unk_id

    def words(self, sentence: str, ids: np.ndarray) -> list[str]:
        """``ids`` [tokens]: the encoding of ``sentence`` alone."""
        at = np.flatnonzero(ids == self.unk_id)
        if self.starts_word is None or self.pre_tokenizer is None:
            return [self.UNRECOVERED] * len(at)
        text = self.normalizer.normalize_str(sentence) if self.normalizer is not None else sentence
        words = [w for w, _ in self.pre_tokenizer.pre_tokenize_str(text)]
        word_of = np.cumsum(self.starts_word[ids]) - 1  # [tokens]: index of the word each token belongs to
        if len(ids) == 0 or word_of[-1] != len(words) - 1:
            return [self.UNRECOVERED] * len(at)
        return [words[word_of[i]] for i in at]


def _hash(word: str) -> int:
    # A stable 64-bit hash (Python's hash() is salted per process, and workers are processes).
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def _kept(counts: Mapping[str, int], level: int) -> Counter:
    """The words whose hash falls in the lowest 2**-level of the range: the same words on every worker."""
    if level == 0:
        return Counter(counts)
    limit = 1 << (64 - level)
    return Counter({w: c for w, c in counts.items() if _hash(w) < limit})


def fit(counts: Counter, level: int, capacity: int = CAPACITY) -> tuple[Counter, int]:
    """Raise the level (halve the words kept) until at most ``capacity`` distinct words remain.

    Which words are kept depends only on the level, and the level only on the set of distinct words of the
    whole corpus (a part of the corpus never needs a higher level than the whole), so the result is the same
    however the runner splits and merges the batches; and every kept word has its exact count, since none of
    its occurrences was dropped at a lower level.
    """
    while len(counts) > capacity:
        level += 1
        counts = _kept(counts, level)
    return counts, level


class UnkWordsFn(beam.CombineFn):
    """Merges per-batch ``Counter``s of [UNK] words into one bounded sample ``(counts, level)``."""

    def __init__(self, capacity: int = CAPACITY, top: int = TOP) -> None:
        self.capacity = capacity
        self.top = top

    def create_accumulator(self) -> tuple[Counter, int]:
        return Counter(), 0

    def add_input(self, acc: tuple[Counter, int], words: Mapping[str, int]) -> tuple[Counter, int]:
        counts, level = acc
        counts.update(_kept(words, level))
        return fit(counts, level, self.capacity)

    def merge_accumulators(self, accs: Iterable[tuple[Counter, int]]) -> tuple[Counter, int]:
        accs = list(accs)
        level = max((lv for _, lv in accs), default=0)
        total: Counter = Counter()
        for counts, lv in accs:
            total.update(counts if lv == level else _kept(counts, level))
        return fit(total, level, self.capacity)

    def extract_output(self, acc: tuple[Counter, int]) -> dict[str, Any]:
        return summary(*acc, top=self.top)


def summary(counts: Mapping[str, int], level: int, top: int = TOP) -> dict[str, Any]:
    """The manifest's ``statistics.unk_words``: most frequent first, ties by word (the same on any runner)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {"top": [[w, c] for w, c in ranked], "exact": level == 0, "sampled_fraction": 2.0**-level}


# Past this share of [UNK] tokens the vocabulary does not fit the text (an uncased vocabulary under --cased made
# 8.8%, every capitalised word; BERT's vocabularies on their own language's prose give well under 1%): said by
# the pretraining and task summaries and the report.
UNK_WARNING_RATE = 0.02


def unk_rate(counters: dict[str, Any]) -> float:
    return counters.get(UNK_TOKENS, 0) / max(counters.get("tokens", 0), 1)


def unk_warning(counters: dict[str, Any], statistics: dict[str, Any], lowercase: Any) -> str | None:
    """One line when more than :data:`UNK_WARNING_RATE` of the tokens are [UNK], naming the commonest unknown
    words (the manifest's ``statistics.unk_words``), so that a run on text its vocabulary cannot read does not
    pass with exit 0 and no word. None below the rate."""
    rate = unk_rate(counters)
    if rate <= UNK_WARNING_RATE:
        return None
    top = (statistics.get("unk_words") or {}).get("top") or []
    words = ", ".join(f"{w!r} {n}" for w, n in top[:8])
    hint = (
        "capitalised words among them: a cased text under an uncased vocabulary? (a vocabulary that lowercases "
        "takes no --cased)"
        if any(isinstance(w, str) and w[:1].isupper() for w, _ in top[:8]) and lowercase is False
        else "the vocabulary was not made for this text (another language or script, or other casing?)"
    )
    return (
        f"warning: {rate * 100:.1f}% of the tokens are [UNK] ({counters.get(UNK_TOKENS, 0)} of "
        f"{counters.get('tokens', 0)})" + (f"; commonest unknown words: {words}" if words else "") + f": {hint}"
    )
