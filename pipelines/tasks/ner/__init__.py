"""``bertprep task ner``: named-entity recognition from CoNLL files (``token POS chunk TAG``) or char-tag files
(``char TAG``, Chinese NER). Its job (the flags, validated here), its plan, the parser (``parse.py``) and the
featurizer (``featurize.py``: windows of whole words, each word owned by one window).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from bertstream.cli.errors import UsageError, check
from bertstream.cli.options import opt, section
from bertstream.pipelines.tasks.kind import (
    TAG_PER_TOKEN,
    Inputs,
    LabelSource,
    Plan,
    TaskIO,
    TaskKind,
    check_max_seq_length,
)
from bertstream.schemas import tasks as T

SCHEMES = ("iob2", "iob1")
INPUT_FORMATS = ("conll", "char-tag")
OUTSIDE = "O"  # every NER label set holds it: a derived set gets it, a given one must have it


@dataclass(frozen=True, kw_only=True, slots=True)
class NerJob:
    io: TaskIO = section(TaskIO)
    scheme: str = opt("iob2", "Tagging scheme of the input (iob1 is converted to IOB2).", choices=SCHEMES, show=True)
    window_overlap: int = opt(
        16, "Words shared by consecutive windows of a sentence longer than --max-seq-length.", show=True
    )
    input_format: str = opt(
        "conll",
        "conll: 'token POS chunk TAG' lines; char-tag: 'char TAG' lines (Chinese NER, e.g. People's Daily).",
        flag="--format",
        choices=INPUT_FORMATS,
        show=True,
    )
    label_source: LabelSource = section(LabelSource)
    max_seq_length: int = opt(128, show=True)

    def __post_init__(self) -> None:
        check_max_seq_length(self.max_seq_length)
        check(self.scheme in SCHEMES, "scheme", f"must be one of {SCHEMES}, got {self.scheme!r}")
        check(
            0 <= self.window_overlap <= (self.max_seq_length - 2) // 2,
            "window_overlap",
            f"must be in [0, (max_seq_length - 2) // 2 = {(self.max_seq_length - 2) // 2}], got {self.window_overlap}",
        )


class Ner(TaskKind):
    name = "ner"
    layouts = {T.NER: T.TOKEN_LABELS}
    unit = "sentences"  # one input record: the manifest counts sentences_read, _used and _dropped.<reason>
    summary = "Named-entity recognition from CoNLL files (token POS chunk TAG) or char-tag files (char TAG)."
    job = NerJob

    def plan(self, job: NerJob, got: Inputs) -> Plan:
        from bertstream.pipelines.tasks.labels import plan_for
        from bertstream.pipelines.tasks.ner.featurize import SentenceFeaturizer
        from bertstream.pipelines.tasks.ner.parse import ConllParser, looks_like_conll

        cfg = got.config(T.NER, job.io, job.max_seq_length, job.label_source.labels)
        for f in got.files:
            looks_like_conll(f.path, input_format=job.input_format)
        label_set_from = job.label_source.label_set_from
        label_plan = plan_for(cfg, got.spec, label_set_from, labeled=True, always=(OUTSIDE,))
        if label_plan.labels is not None and OUTSIDE not in label_plan.labels:
            raise UsageError("labels", f"an NER label set must include {OUTSIDE!r}, got {list(label_plan.labels)}")
        featurizer = partial(
            SentenceFeaturizer,
            got.spec,
            max_seq_length=cfg.max_seq_length,
            window_overlap=job.window_overlap,
            training=cfg.training,
            label_source=label_plan.source,
        )
        parameters = {"scheme": job.scheme, "window_overlap": job.window_overlap}
        task = {"labeled": True, "scheme": "iob2", "input_scheme": job.scheme, "window_overlap": job.window_overlap}
        if job.input_format != "conll":  # only then: manifests of CoNLL runs stay as they were
            task["input_format"] = job.input_format
        parser = ConllParser(job.scheme, job.input_format)
        return Plan(cfg, parser, featurizer, label_plan, parameters, task, TAG_PER_TOKEN, label_set_from)


KIND = Ner()
