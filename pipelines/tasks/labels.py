"""The label set of a run: where it comes from, and the ``Labels`` stage that provides it as a side input.

Sources, in order of precedence (``LabelPlan.source``):

- ``manifest:DIR``: ``--label-set-from DIR``, the training dataset's manifest (same kind, same vocab);
- ``explicit``: ``--labels a,b,...`` (order = ids);
- ``glue:NAME``: a GLUE preset's standard list;
- ``derived``: sorted distinct labels of the training split itself (plus the kind's ``always``: NER's ``O``);
- ``none``: regression, SQuAD, and unlabeled splits without any of the above.

A fixed set in a training split drops rows with other labels (counted); in an evaluation split such a row
stops the run. An evaluation split cannot derive its own labels (ids would not match the model's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.dataset import load_manifest
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.tasks.kind import MAX_LABELS, NO_LABELS, LabelPlan, TaskConfig
from bertstream.pipelines.tasks.read import RecordBatch
from bertstream.pipelines.tokenizer.load import TokenizerSpec
from bertstream.schemas.manifest import Manifest


def labels_from_manifest(
    manifest: Manifest, directory: str, *, kind: str, vocab_sha256: str, lowercase: bool
) -> tuple[str, ...]:
    """The training dataset's label names; usage errors name the flag that disagrees."""
    if manifest.kind != kind:
        raise UsageError("label-set-from", f"{directory} holds a {manifest.kind!r} dataset, not {kind!r}")
    if manifest.vocab_sha256 != vocab_sha256:
        raise UsageError(
            "vocab",
            f"vocab sha256 {vocab_sha256[:12]}… differs from {manifest.vocab_sha256[:12]}… "
            f"of the training dataset {directory}: use the checkpoint's tokenizer for every split",
        )
    if manifest.lowercase != lowercase:
        raise UsageError(
            "lowercase",
            f"the training dataset {directory} is {'uncased' if manifest.lowercase else 'cased'}; "
            f"pass {'--lowercase' if manifest.lowercase else '--cased'}",
        )
    labels = manifest.task.get("labels")
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise UsageError("label-set-from", f"{directory}/manifest.json has no task label list")
    return tuple(labels)


def plan_labels(
    *,
    training: bool,
    labeled: bool,
    explicit: tuple[str, ...],
    preset: tuple[str, ...] | None,
    preset_name: str | None,
    from_manifest: tuple[str, ...] | None,
    manifest_dir: str | None,
    split: str,
    always: tuple[str, ...] = (),
) -> LabelPlan:
    if from_manifest is not None and explicit:
        raise UsageError("labels", "give --labels or --label-set-from, not both")
    if from_manifest is not None:
        plan = LabelPlan(from_manifest, f"manifest:{manifest_dir}", always)
    elif explicit:
        plan = LabelPlan(explicit, "explicit", always)
    elif preset:
        plan = LabelPlan(preset, f"glue:{preset_name}", always)
    elif not labeled:
        return NO_LABELS
    elif training:
        return LabelPlan(None, "derived", always)
    else:
        raise UsageError(
            "label-set-from",
            f"split {split!r} is not a training split: its label ids must be the training "
            "split's; pass --label-set-from TRAIN_DIR (or --labels)",
        )
    return plan


def label_manifest(label_set_from: str | None, kind: str, spec: TokenizerSpec) -> tuple[str, ...] | None:
    """The label names of ``--label-set-from``'s dataset (same kind, vocab and casing), None without it."""
    if not label_set_from:
        return None
    try:
        manifest = load_manifest(label_set_from)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError("label-set-from", str(e)) from None
    return labels_from_manifest(
        manifest, label_set_from, kind=kind, vocab_sha256=spec.vocab.sha256, lowercase=spec.lowercase
    )


def plan_for(
    cfg: TaskConfig,
    spec: TokenizerSpec,
    label_set_from: str | None,
    *,
    labeled: bool,
    preset: tuple[str, ...] | None = None,
    preset_name: str | None = None,
    always: tuple[str, ...] = (),
) -> LabelPlan:
    """The label plan of a labelled run (classification, NER) from its settings and ``--label-set-from``."""
    return plan_labels(
        training=cfg.training,
        labeled=labeled,
        explicit=cfg.labels,
        preset=preset,
        preset_name=preset_name,
        from_manifest=label_manifest(label_set_from, cfg.kind, spec),
        manifest_dir=label_set_from,
        split=cfg.split,
        always=always,
    )


def labels_of(batch: RecordBatch) -> Iterable[str]:
    """Distinct labels of a batch (tags for NER); no label for unlabeled rows."""
    seen: set[str] = set()
    for r in batch.records:
        seen.update(r.label_names())
    return seen


def finish_derived(found: Iterable[str], always: tuple[str, ...] = ()) -> list[str]:
    """The derived label set, sorted; more labels than an id holds is refused here, before any row is written
    (200,000 distinct values ended in pyarrow's 'Value 111112 too large to fit in C integer type')."""
    labels = sorted({*found, *always})
    if len(labels) > MAX_LABELS:
        raise InputError(
            f"the training split holds {len(labels):,} distinct labels, more than a label id holds ({MAX_LABELS:,}): "
            f"is the label column the labels (e.g. {labels[0]!r}, {labels[1]!r}, ...)? (--labels fixes a set)"
        )
    return labels


class Labels(beam.PTransform):
    """``PCollection[RecordBatch]`` -> singleton ``list[str]``: the fixed set, or derived from the records."""

    def __init__(self, plan: LabelPlan) -> None:
        super().__init__()
        self.plan = plan

    def expand(self, batches):
        if not self.plan.derived:
            return batches.pipeline | "Fixed" >> beam.Create([list(self.plan.labels)])
        return (
            batches
            | "LabelsOfBatch" >> beam.FlatMap(labels_of)
            | "Distinct" >> beam.Distinct()
            | "All" >> beam.combiners.ToList()
            | "Sort" >> beam.Map(finish_derived, self.plan.always)
        )


def task_labels(plan: LabelPlan, labels: list[str]) -> dict[str, Any]:
    """The manifest's label entries."""
    return {
        "labels": list(labels),
        "label_ids": {name: i for i, name in enumerate(labels)},
        "num_labels": len(labels),
        "label_source": plan.source,
    }
