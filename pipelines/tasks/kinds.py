"""The table of task kinds: one ``bertprep task`` command each, registered from here, in this order.

Adding a kind: its room (a folder beside these, whose ``__init__.py`` defines ``KIND``: see
``bertstream.pipelines.tasks.kind.TaskKind``; a drop reason of its own declared there with
``bertstream.pipelines.common.counters.reason``), one line here, its package in pyproject's ``packages``; its rows
fit a layout of ``bertstream.schemas.tasks`` (a new ``RowLayout`` there only for rows none holds) and, to fine-tune
on it, its ``Task`` in ``bertstream.trainer.finetune.tasks`` and its head.
"""

from __future__ import annotations

from typing import Any

from bertstream.pipelines.tasks import classification, ner, squad
from bertstream.pipelines.tasks.kind import TaskKind

KINDS: tuple[TaskKind, ...] = (classification.KIND, ner.KIND, squad.KIND)


def kind_of(job: Any) -> TaskKind:
    """The kind whose settings ``job`` is."""
    for kind in KINDS:
        if isinstance(job, kind.job):
            return kind
    raise TypeError(f"not a task job: {type(job).__name__}")
