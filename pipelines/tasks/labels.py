"""The label set of a run: where it comes from, and the ``Labels`` stage that provides it as a side input.

Sources, in order of precedence (``LabelPlan.source``):

- ``manifest:DIR``: ``--label-set-from DIR``, the training dataset's manifest (same kind, same vocab);
- ``explicit``: ``--labels a,b,...`` (order = ids);
- ``glue:NAME``: a GLUE preset's standard list;
- ``derived``: sorted distinct labels of the training split itself (NER adds ``O``);
- ``none``: regression, SQuAD, and unlabeled splits without any of the above.

A fixed set in a training split drops rows with other labels (counted); in an evaluation split such a row
stops the run. An evaluation split cannot derive its own labels (ids would not match the model's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from bertstream.cli.errors import UsageError
from bertstream.pipelines.tasks.read import RecordBatch, Sentence
from bertstream.schemas import tasks as T
from bertstream.schemas.manifest import Manifest

OUTSIDE = "O"


@dataclass(frozen=True, slots=True)
class LabelPlan:
    labels: tuple[str, ...] | None  # None: derive from the data
    source: str

    @property
    def derived(self) -> bool:
        return self.labels is None


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
    kind: str,
    training: bool,
    labeled: bool,
    explicit: tuple[str, ...],
    preset: tuple[str, ...] | None,
    preset_name: str | None,
    from_manifest: tuple[str, ...] | None,
    manifest_dir: str | None,
    split: str,
) -> LabelPlan:
    if kind in (T.REGRESSION, T.SQUAD):
        return LabelPlan((), "none")
    if from_manifest is not None and explicit:
        raise UsageError("labels", "give --labels or --label-set-from, not both")
    if from_manifest is not None:
        plan = LabelPlan(from_manifest, f"manifest:{manifest_dir}")
    elif explicit:
        plan = LabelPlan(explicit, "explicit")
    elif preset:
        plan = LabelPlan(preset, f"glue:{preset_name}")
    elif not labeled:
        return LabelPlan((), "none")
    elif training:
        return LabelPlan(None, "derived")
    else:
        raise UsageError(
            "label-set-from",
            f"split {split!r} is not a training split: its label ids must be the training "
            "split's; pass --label-set-from TRAIN_DIR (or --labels)",
        )
    if kind == T.NER and plan.labels is not None and OUTSIDE not in plan.labels:
        raise UsageError("labels", f"an NER label set must include {OUTSIDE!r}, got {list(plan.labels)}")
    return plan


def labels_of(batch: RecordBatch) -> Iterable[str]:
    """Distinct labels of a batch (tags for NER); no label for unlabeled rows."""
    seen: set[str] = set()
    for r in batch.records:
        if isinstance(r, Sentence):
            seen.update(r.tags)
        elif r.label is not None:
            seen.add(r.label)
    return seen


def finish_derived(found: Iterable[str], kind: str) -> list[str]:
    labels = set(found)
    if kind == T.NER:
        labels.add(OUTSIDE)
    return sorted(labels)


class Labels(beam.PTransform):
    """``PCollection[RecordBatch]`` -> singleton ``list[str]``: the fixed set, or derived from the records."""

    def __init__(self, plan: LabelPlan, kind: str) -> None:
        super().__init__()
        self.plan = plan
        self.kind = kind

    def expand(self, batches):
        if not self.plan.derived:
            return batches.pipeline | "Fixed" >> beam.Create([list(self.plan.labels)])
        kind = self.kind
        return (
            batches
            | "LabelsOfBatch" >> beam.FlatMap(labels_of)
            | "Distinct" >> beam.Distinct()
            | "All" >> beam.combiners.ToList()
            | "Sort" >> beam.Map(finish_derived, kind)
        )


def task_labels(plan: LabelPlan, labels: list[str]) -> dict[str, Any]:
    """The manifest's label entries."""
    return {
        "labels": list(labels),
        "label_ids": {name: i for i, name in enumerate(labels)},
        "num_labels": len(labels),
        "label_source": plan.source,
    }
