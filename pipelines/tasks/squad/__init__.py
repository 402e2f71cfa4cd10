"""``bertprep task squad``: extractive question answering from SQuAD v1.1/v2.0 JSON. Its job (the flags, validated
here), its plan, the parser (``parse.py``: answers aligned to their contexts), the featurizer (``featurize.py``:
context windows) and ``examples.jsonl`` for the official metric (``examples.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from bertstream.cli.errors import check
from bertstream.cli.options import opt, section
from bertstream.pipelines.tasks.kind import (
    ANSWER_SPAN,
    NO_LABELS,
    Inputs,
    Plan,
    TaskIO,
    TaskKind,
    check_max_seq_length,
)
from bertstream.schemas import tasks as T


def parse_articles(text: str | None) -> tuple[int, int | None] | None:
    """``START:END`` (either side may be empty) -> ``(start, end)``: a Python slice of article indices."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    check(m is not None, "articles", f"must be START:END with non-negative integers (e.g. 0:40), got {text!r}")
    assert m is not None  # for the type checker: check() raised otherwise
    start = int(m.group(1)) if m.group(1) else 0
    end = int(m.group(2)) if m.group(2) else None
    check(end is None or end > start, "articles", f"END must be greater than START, got {text!r}")
    return start, end


@dataclass(frozen=True, kw_only=True, slots=True)
class SquadJob:
    io: TaskIO = section(TaskIO)
    max_seq_length: int = opt(384, show=True)
    doc_stride: int = opt(128, "Tokens between context window starts.", show=True)
    max_query_length: int = opt(64, show=True)
    articles: tuple[int, int | None] | None = opt(
        None, "START:END: only these articles (by index) of each file, e.g. 0:40.", convert=parse_articles
    )

    def __post_init__(self) -> None:
        check_max_seq_length(self.max_seq_length)
        check(
            1 <= self.max_query_length <= self.max_seq_length - 4,
            "max_query_length",
            f"must be in [1, max_seq_length - 4 = {self.max_seq_length - 4}], got {self.max_query_length}",
        )
        context = self.max_seq_length - self.max_query_length - 3
        check(
            1 <= self.doc_stride <= context,
            "doc_stride",
            f"must be in [1, max_seq_length - max_query_length - 3 = {context}], got {self.doc_stride}",
        )
        if self.articles is not None:
            start, end = self.articles
            check(start >= 0 and (end is None or end > start), "articles", f"bad article range {self.articles}")


class Squad(TaskKind):
    name = "squad"
    layouts = {T.SQUAD: T.SPANS}
    unit = "examples"  # one input record: the manifest counts examples_read, _used and _dropped.<reason>
    summary = "Extractive QA from SQuAD v1.1/v2.0 JSON: features + examples.jsonl for the official metric."
    job = SquadJob
    files = (T.EXAMPLES_FILE,)

    def plan(self, job: SquadJob, got: Inputs) -> Plan:
        from bertstream.pipelines.tasks.squad.featurize import ExampleFeaturizer
        from bertstream.pipelines.tasks.squad.parse import SquadParser, looks_like_squad

        cfg = got.config(T.SQUAD, job.io, job.max_seq_length)
        for f in got.files:
            looks_like_squad(f.path)
        featurizer = partial(
            ExampleFeaturizer,
            got.spec,
            max_seq_length=cfg.max_seq_length,
            doc_stride=job.doc_stride,
            max_query_length=job.max_query_length,
        )
        articles = None if job.articles is None else list(job.articles)
        parameters = {"doc_stride": job.doc_stride, "max_query_length": job.max_query_length, "articles": articles}
        task = {"labeled": True, **parameters}
        parser = SquadParser(job.articles, cfg.training)
        return Plan(cfg, parser, featurizer, NO_LABELS, parameters, task, ANSWER_SPAN)

    def write_files(self, records: Any, output_dir: str, layout: Any) -> Any:
        import apache_beam as beam

        from bertstream.pipelines.tasks.squad.examples import WriteExamples

        files = records | "WriteExamples" >> WriteExamples(output_dir, layout=layout)
        return files | "AsList" >> beam.Map(lambda info: [info])


KIND = Squad()
