"""``bertprep task classification|ner|squad``: fine-tuning datasets from labelled task files.

Same conventions as ``bertprep pretraining``: any other ``--option`` is a Beam pipeline option (default
runner: Beam's in-process FnApiRunner; ``--direct_num_workers=N`` for worker processes); bad values are
usage errors naming the flag; input problems found while running stop the run with no manifest written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from bertstream.cli import options
from bertstream.cli.options import click_options
from bertstream.pipelines.common.cli_setup import HELP, PASSTHROUGH, quiet_beam
from bertstream.pipelines.tasks.config import ClassificationJob, NerJob, SquadJob


def _run(ctx: click.Context, fn: Callable, cls: type, values: dict[str, Any]) -> None:
    """Build the job ``cls`` from the flags and run it with ``fn``, mapping our errors to click's (exit 2 for
    usage errors, 1 for input errors)."""
    quiet_beam(limit_arenas=False)
    from bertstream.pipelines.common.cli_errors import bertprep_errors
    from bertstream.pipelines.common.redact import redact_logs

    redact_logs([*ctx.args, *values["inputs"], values["vocab"] or "", values["output"] or ""])
    with bertprep_errors(cls):
        result = fn(options.build(cls, **values, beam_args=ctx.args))
    _print_summary(result)


def _print_summary(result) -> None:
    from bertstream.pipelines.common import (
        counters as C,  # imports Beam: not at CLI start-up (the run has loaded it by now)
    )

    m = result.manifest
    c, t = m.counters, m.task
    unit = {"classification": "rows", "regression": "rows", "ner": "sentences", "squad": "examples"}[m.kind]
    drops = C.dropped(c, unit)
    click.echo(f"done in {result.seconds:.1f} s: {result.input_bytes / 1e6:.1f} MB of input")
    click.echo(
        f"  kind {m.kind}, split {t['split']} ({'training' if t['training'] else 'evaluation'}), "
        f"vocab sha256 {m.vocab['sha256'][:12]}…"
    )
    click.echo(
        f"  {unit}: {c.get(f'{unit}_read', 0)} read, {c.get(f'{unit}_used', 0)} used, {sum(drops.values())} dropped"
        + (f" ({', '.join(f'{k}: {v}' for k, v in drops.items())})" if drops else "")
    )
    click.echo(
        f"  rows written: {m.totals['rows']}, tokens {m.totals['tokens']}, max length {m.statistics.get('max_length')}"
    )
    if t.get("labels"):
        click.echo(
            f"  labels ({t['label_source']}): {', '.join(t['labels'][:20])}" + (" …" if len(t["labels"]) > 20 else "")
        )
    for reason, places in c.get("first_lines", {}).items():
        click.echo(f"  {reason}: {c.get(reason, 0)} (first: {', '.join(places[:3])})")
    click.echo(
        f"  output: {result.output_dir}/manifest.json and {len(m.shards)} shard files"
        + "".join(f", {f['path']}" for f in t.get("files", []))
    )


@click.group(context_settings=HELP)
def task() -> None:
    """Write fine-tuning datasets (classification, NER, SQuAD) for a pretrained checkpoint."""


def _task_command(name: str, cls: type, summary: str) -> None:
    """``bertprep task NAME``: the flags of job ``cls``, run by ``bertstream.pipelines.tasks.pipeline.run_NAME``."""

    @task.command(name, context_settings=PASSTHROUGH, help=f"{summary}\n\n{_BEAM_OPTIONS}")
    @click_options(cls)
    @click.pass_context
    def command(ctx: click.Context, **values: Any) -> None:
        from bertstream.pipelines.tasks import pipeline

        _run(ctx, getattr(pipeline, f"run_{name}"), cls, values)


_BEAM_OPTIONS = "Any other --option is a Beam pipeline option (--runner, --direct_num_workers, ...)."
_task_command(
    "classification",
    ClassificationJob,
    "Sentence (pair) classification or regression: [CLS] A [SEP] (B [SEP]) + label.",
)
_task_command(
    "ner",
    NerJob,
    "Named-entity recognition from CoNLL files (token POS chunk TAG) or char-tag files (char TAG).",
)
_task_command(
    "squad",
    SquadJob,
    "Extractive QA from SQuAD v1.1/v2.0 JSON: features + examples.jsonl for the official metric.",
)
