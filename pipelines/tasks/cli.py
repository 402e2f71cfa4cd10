"""``bertprep task classification|ner|squad``: fine-tuning datasets from labelled task files, one command per
kind of ``bertstream.pipelines.tasks.kinds.KINDS`` (its flags: the fields of the kind's job).

Same conventions as ``bertprep pretraining``: any other ``--option`` is a Beam pipeline option (default
runner: Beam's in-process FnApiRunner; ``--direct_num_workers=N`` for worker processes); bad values are
usage errors naming the flag; input problems found while running stop the run with no manifest written.
"""

from __future__ import annotations

from typing import Any

import click

from bertstream.cli import options
from bertstream.cli.options import click_options
from bertstream.pipelines.runners.cli_setup import HELP, PASSTHROUGH, quiet_beam
from bertstream.pipelines.tasks.kind import TaskKind
from bertstream.pipelines.tasks.kinds import KINDS


def _run(ctx: click.Context, kind: TaskKind, values: dict[str, Any]) -> None:
    """Build the kind's job from the flags and run it, mapping our errors to click's (exit 2 for usage errors, 1
    for input errors)."""
    quiet_beam(limit_arenas=False)
    from bertstream.pipelines.common.redact import redact_logs
    from bertstream.pipelines.runners.cli_errors import bertprep_errors
    from bertstream.pipelines.tasks.pipeline import run_task

    redact_logs([*ctx.args, *values["inputs"], values["vocab"] or "", values["output"] or ""])
    with bertprep_errors(kind.job):
        result = run_task(options.build(kind.job, **values, beam_args=ctx.args))
    _print_summary(result, kind.unit)


def _print_summary(result, unit: str) -> None:
    from bertstream.pipelines.common import (
        counters as C,  # imports Beam: not at CLI start-up (the run has loaded it by now)
    )
    from bertstream.pipelines.common import source_stats as S

    m = result.manifest
    c, t = m.counters, m.task
    drops = C.dropped(c, unit)
    click.echo(f"done in {result.seconds:.1f} s: {result.input_bytes / 1e6:.1f} MB of input")
    click.echo(
        f"  kind {m.kind}, split {t['split']} ({'training' if t['training'] else 'evaluation'}), "
        f"vocab sha256 {m.vocab['sha256'][:12]}…"
    )
    beyond = f", {c.get(f'{unit}_beyond_max_rows', 0)} beyond --max-rows {t['max_rows']}" if t.get("max_rows") else ""
    click.echo(
        f"  {unit}: {c.get(f'{unit}_read', 0)} read{beyond}, {c.get(f'{unit}_used', 0)} used, "
        f"{sum(drops.values())} dropped" + (f" ({', '.join(f'{k}: {v}' for k, v in drops.items())})" if drops else "")
    )
    click.echo(
        f"  rows written: {m.totals['rows']}, tokens {m.totals['tokens']}, max length {m.statistics.get('max_length')}"
    )
    click.echo(f"  [UNK]: {c.get(S.UNK_TOKENS, 0)} of {c.get('tokens', 0)} tokens ({S.unk_rate(c) * 100:.2f}%)")
    if t.get("labels"):
        click.echo(
            f"  labels ({t['label_source']}): {', '.join(t['labels'][:20])}" + (" …" if len(t["labels"]) > 20 else "")
        )
    truncated = _truncation_line(c, t)
    if truncated:
        click.echo(f"  {truncated}")
    altered = C.altered_text(c)  # a Latin-1 file's bytes became U+FFFD: counted in the manifest, said here too
    if altered:
        click.echo(f"  altered: {altered}")
    for reason, places in c.get("first_lines", {}).items():
        click.echo(f"  {reason}: {c.get(reason, 0)} (first: {', '.join(places[:3])})")
    click.echo(
        f"  output: {result.output_dir}/manifest.json and {len(m.shards)} shard files"
        + "".join(f", {f['path']}" for f in t.get("files", []))
    )
    warning = S.unk_warning(c, {}, m.vocab.get("lowercase"))  # last, where it is seen, as pretraining's
    if warning:
        click.echo(warning)


# What each kind cuts to fit --max-seq-length (--max-query-length), counted while featurizing; NER's words cut
# to a window are listed with their first lines below it.
_TRUNCATED = {"rows_truncated": "rows", "questions_truncated": "questions"}


def _truncation_line(c: dict[str, Any], t: dict[str, Any]) -> str | None:
    """What truncation removed, said where a run's summary is read (it was a manifest counter only)."""
    cut = {what: c[key] for key, what in _TRUNCATED.items() if c.get(key)}
    if not cut:
        return None
    removed = c.get("tokens_removed_by_truncation", 0)
    share = removed / max(removed + c.get("tokens", 0), 1)
    # (a SQuAD context's windows repeat its tokens: a share of its tokens written would say nothing)
    return (
        f"truncated to --max-seq-length {t.get('max_seq_length')}: "
        + ", ".join(f"{n} {what}" for what, n in cut.items())
        + f", {removed} tokens removed"
        + (f" ({share * 100:.1f}% of the text's tokens)" if "rows" in cut else "")
    )


@click.group(context_settings=HELP)
def task() -> None:
    """Write fine-tuning datasets (classification, NER, SQuAD) for a pretrained checkpoint."""


def _task_command(kind: TaskKind) -> None:
    """``bertprep task NAME``: the flags of the kind's job, run by ``bertstream.pipelines.tasks.pipeline.run_task``."""

    @task.command(kind.name, context_settings=PASSTHROUGH, help=f"{kind.summary}\n\n{_BEAM_OPTIONS}")
    @click_options(kind.job)
    @click.pass_context
    def command(ctx: click.Context, **values: Any) -> None:
        _run(ctx, kind, values)


_BEAM_OPTIONS = "Any other --option is a Beam pipeline option (--runner, --direct_num_workers, ...)."
for _kind in KINDS:
    _task_command(_kind)
