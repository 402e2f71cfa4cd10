"""SQuAD JSON files -> ``QAExample`` records, answers aligned to their contexts (question answering).

The file is read an article at a time (``read_articles``: memory holds one article, at most
``limits.MAX_RECORD_BYTES``, refused past it naming the article and its byte offset) and its contexts kept byte
for byte (no cleaning), so that answer offsets stay valid. ``looks_like_squad`` checks a file before the pipeline
starts, ``read_articles`` checks the shape, ``parse_squad`` reads the selected articles, ``align_answer`` repairs
answer offsets; ``SquadParser`` is the parser ``ReadRecords`` runs. (``featurize.py`` featurizes them.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.counters import MALFORMED_JSON, Tally, drop, reason
from bertstream.pipelines.common.files import InputError, read_chunks
from bertstream.pipelines.inputs import json_stream, limits
from bertstream.pipelines.tasks.read import counted_chunks

UNIT = "examples"  # the kind's unit (``KIND.unit``): what one record is, as the counters name it

# The kind's own drop reasons (``<unit>_dropped.<reason>``; the shared ones: bertstream.pipelines.common.counters)
EMPTY_QUESTION = reason("empty_question", (UNIT,), "a SQuAD question that is blank")
EMPTY_CONTEXT = reason("empty_context", (UNIT,), "a SQuAD paragraph whose context is blank")
DUPLICATE_ID = reason("duplicate_id", (UNIT,), "a SQuAD question id seen before")
NO_MATCHING_ANSWER = reason("no_matching_answer", (UNIT,), "no answer found in its context at its offset")


@dataclass(slots=True)
class QAExample:
    """One SQuAD question. ``answers``/``answer_starts`` are as given; ``span`` is the character span of the
    first answer that matched the context (after repair), None when none did or the question is impossible."""

    ordinal: int  # 0-based position of the question in its file, counting every article
    qid: str
    title: str
    context: str
    question: str
    answers: list[str]
    answer_starts: list[int]
    span: tuple[int, int] | None
    is_impossible: bool

    def size(self) -> int:
        return len(self.context) + len(self.question)

    def label_names(self) -> Iterable[str]:
        return ()

    def example_json(self, example_index: int) -> dict[str, Any]:
        return {
            "example_index": example_index,
            "id": self.qid,
            "title": self.title,
            "context": self.context,
            "question": self.question,
            "answers": {"text": self.answers, "answer_start": self.answer_starts},
            "is_impossible": self.is_impossible,
            "answer_span": None if self.span is None else list(self.span),
        }


NEARBY_CHARS = 200  # how far from a wrong answer_start the SQuAD fallback looks for the answer text


def align_answer(context: str, text: str, start: Any) -> tuple[tuple[int, int] | None, str]:
    """Character span of an answer in its context and how it was found.

    ``exact`` when ``context[start:start+len(text)] == text``; else the documented fallback, in order:
    ``whitespace_normalized`` (same words at ``start``, whitespace differing), ``offset_shifted`` (the exact
    text nearest to ``start`` within ``NEARBY_CHARS``), ``offset_shifted_whitespace_normalized`` (the same
    with whitespace differing); ``unmatched`` when none applies (or the text is empty / start not an int).
    """
    if not isinstance(text, str) or not text.strip() or not isinstance(start, int) or isinstance(start, bool):
        return None, "unmatched"
    if 0 <= start and context[start : start + len(text)] == text:
        return (start, start + len(text)), "exact"
    pattern = re.compile(r"\s+".join(re.escape(w) for w in text.split()))
    lead = len(text) - len(text.lstrip())
    if 0 <= start <= len(context):
        m = pattern.match(context, min(start + lead, len(context)))
        if m:
            return m.span(), "whitespace_normalized"
    # Both ends within the context: an answer_start of 10**30 overflowed finditer's C index (a details log).
    lo = min(max(0, start - NEARBY_CHARS), len(context))
    hi = min(len(context), max(0, start) + len(text) + NEARBY_CHARS)
    best = None
    for m in pattern.finditer(context, lo, hi):
        if best is None or abs(m.start() - start) < abs(best.start() - start):
            best = m
    if best is None:
        return None, "unmatched"
    return best.span(), "offset_shifted" if best.group() == text.strip() else "offset_shifted_whitespace_normalized"


def looks_like_squad(path: str) -> None:
    """Before the pipeline starts: a usage error unless ``path`` starts with a JSON object."""
    chunks = read_chunks(path, 1024)
    try:
        head = next(chunks, b"")
    finally:
        chunks.close()
    if not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        raise UsageError("input", f"{path}: not SQuAD JSON (does not start with '{{')")


SHAPE = "expected {'data': [{'title', 'paragraphs': [...]}]}"


def read_articles(chunks: Iterable[bytes], path: str) -> Iterator[dict]:
    """The articles of a SQuAD JSON file (``{"data": [{"title", "paragraphs": [...]}, ...]}``, keys in any order),
    one at a time from its bytes ``chunks``; anything else is an ``InputError``, the same one as if the file were
    read whole: malformed JSON (json's words and position) before a wrong shape, which is told once the whole
    file is read. An article over ``limits.MAX_RECORD_BYTES`` is refused, named by its index and byte offset."""
    shape = ""
    try:
        for article in json_stream.array_elements(chunks, path, "data", limits.MAX_RECORD_BYTES, "article"):
            if not (shape or isinstance(article, dict) and isinstance(article.get("paragraphs"), list)):
                shape = SHAPE  # told at the end: a JSON error after it is told first, as before
            if not shape:
                yield article
    except json_stream.NotJson as e:
        raise InputError(f"{path}: not SQuAD JSON ({e})") from None
    except json_stream.WrongShape as e:
        shape = str(e) or SHAPE
    if shape:
        raise InputError(f"{path}: not SQuAD JSON ({shape})")


def check_selection(n: int, articles: tuple[int, int | None] | None, path: str) -> None:
    """A selection of articles past the ``n`` of the file is an ``InputError``."""
    if articles is None:
        return
    start, end = articles
    if start >= n or (end is not None and end > n):
        raise InputError(f"{path}: --articles {start}:{'' if end is None else end} is outside its {n} articles (0:{n})")


def parse_squad(
    articles: Iterable[dict],
    path: str,
    file_index: int,
    selection: tuple[int, int | None] | None,
    training: bool,
    tally: Tally,
) -> Iterator[QAExample]:
    """Questions of the selected articles, answers aligned to their contexts (see ``align_answer``). A selection
    past the file's articles is an ``InputError`` once they are read.

    Dropped (counted with ids): empty question or context, a question id seen before in the file, and in a
    training split an answerable question none of whose answers matches its context. Evaluation keeps such
    questions (their answer texts still count for the metric).
    """
    unit = UNIT
    first, end = selection or (0, None)
    seen: set[str] = set()
    ordinal = n = 0
    for a_index, article in enumerate(articles):
        n += 1
        paragraphs = article.get("paragraphs") or []
        if a_index < first or (end is not None and a_index >= end):
            ordinal += sum(len(p.get("qas") or []) for p in paragraphs if isinstance(p, dict))
            continue
        tally.add("articles_read")
        title = str(article.get("title", ""))
        for para in paragraphs:
            context = para.get("context") if isinstance(para, dict) else None
            for qa in (para.get("qas") or []) if isinstance(para, dict) else []:
                pos, ordinal = ordinal, ordinal + 1
                tally.add(f"{unit}_read")
                if not isinstance(qa, dict):
                    tally.note(drop(MALFORMED_JSON, unit), file_index, pos, f"{path}#{pos}")
                    continue
                qid = str(qa.get("id", f"{path}#{pos}"))
                question = qa.get("question")
                if not isinstance(context, str) or not context.strip():
                    tally.note(drop(EMPTY_CONTEXT, unit), file_index, pos, qid)
                    continue
                if not isinstance(question, str) or not question.strip():
                    tally.note(drop(EMPTY_QUESTION, unit), file_index, pos, qid)
                    continue
                if qid in seen:
                    tally.note(drop(DUPLICATE_ID, unit), file_index, pos, qid)
                    continue
                seen.add(qid)
                impossible = bool(qa.get("is_impossible", False))
                answers = [a for a in (qa.get("answers") or []) if isinstance(a, dict)]
                texts: list[str] = [t if isinstance(t := a.get("text"), str) else "" for a in answers]
                starts = [a.get("answer_start") for a in answers]
                span = None
                for text, start in zip(texts, starts):
                    tally.add("answers_read")
                    s, how = align_answer(context, text, start)
                    if how == "unmatched":
                        tally.note("answers_unmatched", file_index, pos, qid)
                    elif how != "exact":
                        tally.note(f"answers_fixed.{how}", file_index, pos, qid)
                    if span is None and s is not None and not impossible:
                        span = s
                if impossible:
                    tally.add("examples_impossible")
                elif span is None:
                    if not answers:
                        tally.note("examples_without_answers", file_index, pos, qid)
                    if training:
                        tally.note(drop(NO_MATCHING_ANSWER, unit), file_index, pos, qid)
                        continue
                yield QAExample(
                    pos,
                    qid,
                    title,
                    context,
                    question,
                    texts,
                    [s if isinstance(s, int) else -1 for s in starts],
                    span,
                    impossible,
                )
    check_selection(n, selection, path)


class SquadParser:
    def __init__(self, articles: tuple[int, int | None] | None, training: bool) -> None:
        self.articles = articles
        self.training = training

    def __call__(self, path: str, file_index: int, tally: Tally) -> Iterator[QAExample]:
        articles = read_articles(counted_chunks(path, tally), path)
        return parse_squad(articles, path, file_index, self.articles, self.training, tally)
