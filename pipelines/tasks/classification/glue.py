"""GLUE presets: the columns, header quirks and standard label lists of the GLUE task files.

Layouts are those of the GLUE distribution (and of Hugging Face's ``glue`` processors): tab-separated, no
quoting (texts hold bare ``"``), a header line except CoLA train/dev, a UTF-8 BOM on MRPC (removed by the
reader, counted as a control character). Test files have no label column: :func:`resolve` recognises them
by their header and returns an unlabeled layout. MNLI dev/test come as ``*_matched``/``*_mismatched``
files; QQP and MNLI carry extra columns, which are checked for count and otherwise ignored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GluePreset:
    name: str
    text: str  # header name, or a 0-based index (digits) for CoLA's headerless train/dev
    pair: str | None
    label: str
    labels: tuple[str, ...]  # standard label list (ids in this order); () for the regression task STS-B
    header: bool = True
    score_range: tuple[float, float] | None = None  # a regression preset's scores (STS-B: similarity 0..5)

    @property
    def regression(self) -> bool:
        return not self.labels


PRESETS: dict[str, GluePreset] = {
    p.name: p
    for p in (
        GluePreset("cola", "3", None, "1", ("0", "1"), header=False),
        GluePreset("sst2", "sentence", None, "label", ("0", "1")),
        GluePreset("mrpc", "#1 String", "#2 String", "Quality", ("0", "1")),
        GluePreset("qqp", "question1", "question2", "is_duplicate", ("0", "1")),
        GluePreset("stsb", "sentence1", "sentence2", "score", (), score_range=(0.0, 5.0)),
        GluePreset("mnli", "sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral")),
        GluePreset("qnli", "question", "sentence", "label", ("entailment", "not_entailment")),
        GluePreset("rte", "sentence1", "sentence2", "label", ("entailment", "not_entailment")),
    )
}
NAMES = tuple(PRESETS)


@dataclass(frozen=True, slots=True)
class GlueLayout:
    """The columns of one GLUE file: ``label`` is None for a test file."""

    header: bool
    text: str
    pair: str | None
    label: str | None


def resolve(preset: GluePreset, first_fields: list[str], path: str) -> GlueLayout:
    """The layout of a file of ``preset`` from its first line's fields (BOM already removed)."""
    from bertstream.cli.errors import UsageError

    if not preset.header:
        # CoLA: train/dev have no header (source, label, original label, sentence); test has "index sentence".
        if first_fields[:2] == ["index", "sentence"]:
            return GlueLayout(True, "sentence", None, None)
        return GlueLayout(False, preset.text, preset.pair, preset.label)
    missing = [c for c in (preset.text, preset.pair) if c is not None and c not in first_fields]
    if missing:
        raise UsageError("input", f"{path}: not a GLUE {preset.name} file: header {first_fields[:12]} lacks {missing}")
    label = preset.label if preset.label in first_fields else None
    return GlueLayout(True, preset.text, preset.pair, label)
