"""``bertprep task classification|ner|squad``: fine-tuning datasets from labelled task files.

Same conventions as ``bertprep pretraining``: any other ``--option`` is a Beam pipeline option (default
runner: Beam's in-process FnApiRunner; ``--direct_num_workers=N`` for worker processes); bad values are
usage errors naming the flag; input problems found while running stop the run with no manifest written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import click

from configs.errors import ConfigError
from pipelines.tasks.config import INPUT_FORMATS, SCHEMES, parse_articles, parse_labels
from pipelines.tasks.glue import NAMES as GLUE_NAMES

_PASSTHROUGH = dict(ignore_unknown_options=True, allow_extra_args=True, help_option_names=["-h", "--help"])

# Flag for each config field, so a ConfigError names what the user typed.
_FLAGS = {
    "input_format": "--format",
    "max_seq_length": "--max-seq-length",
    "num_shards": "--num-shards",
    "text_column": "--text-column",
    "text_pair_column": "--text-pair-column",
    "label_column": "--label-column",
    "labels": "--labels",
    "split": "--split",
    "scheme": "--scheme",
    "window_overlap": "--window-overlap",
    "doc_stride": "--doc-stride",
    "max_query_length": "--max-query-length",
    "articles": "--articles",
    "header": "--no-header",
    "kind": "--regression",
}


def _quiet_beam() -> None:
    # `import apache_beam` configures root logging at WARNING and chats about optional clients.
    logging.getLogger().setLevel(logging.ERROR)
    # A failing DoFn is logged by Beam with its traceback before the error reaches us; we report it once.
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)


def _common_options(f: Callable) -> Callable:
    """Flags every task shares (applied bottom-up, so listed here in reverse help order)."""
    for decorator in reversed(
        [
            click.option(
                "--input",
                "inputs",
                multiple=True,
                required=True,
                help="File, glob or URL (repeatable); gz/bz2/zst by extension.",
            ),
            click.option("--vocab", required=True, help="The checkpoint's vocab.txt or tokenizer.json (local or URL)."),
            click.option("--output", required=True, help="Output folder (local or URL)."),
            click.option(
                "--split",
                default=None,
                help="Split name (train, dev, dev_matched, test, ...); default: from the "
                "file names. Splits named train* are training splits.",
            ),
            click.option(
                "--lowercase/--cased",
                default=None,
                help="Casing (default: from tokenizer.json; lowercase for vocab.txt).",
            ),
            click.option("--num-shards", type=int, default=0, help="Arrow shards (default: 1-4 from the input size)."),
            click.option("--overwrite", is_flag=True, default=False, help="Replace a dataset already in --output."),
        ]
    ):
        f = decorator(f)
    return f


def _label_options(f: Callable) -> Callable:
    for decorator in reversed(
        [
            click.option(
                "--labels",
                "labels_text",
                default=None,
                help="Label set a,b,... (order = ids). Training rows with other labels are dropped and counted.",
            ),
            click.option(
                "--label-set-from",
                default=None,
                type=str,
                help="Training dataset folder whose manifest gives the label names and ids (evaluation splits).",
            ),
        ]
    ):
        f = decorator(f)
    return f


def _bad(err: ConfigError) -> click.BadParameter:
    flag = _FLAGS.get(err.param, f"--{err.param.replace('_', '-')}")
    return click.BadParameter(err.message, param_hint=f"'{flag}'")


def _labels(text: str | None) -> tuple[str, ...]:
    try:
        return parse_labels(text)
    except ConfigError as e:
        raise _bad(e) from None


def _run(fn: Callable, **kwargs) -> None:
    """Run a pipeline, mapping our errors to click's (exit 2 for usage errors, 1 for input errors)."""
    _quiet_beam()
    from pipelines.common.cli_errors import pipeline_errors
    from pipelines.common.redact import redact_logs

    redact_logs(
        [
            *(kwargs.get("beam_args") or []),
            *kwargs.get("inputs", []),
            kwargs.get("vocab") or "",
            kwargs.get("output_dir") or "",
        ]
    )

    try:
        with pipeline_errors():
            result = fn(**kwargs)
    except ConfigError as e:
        raise _bad(e) from None
    _print_summary(result)


def _print_summary(result) -> None:
    from pipelines.common import counters as C  # imports Beam: not at CLI start-up (the run has loaded it by now)

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def task() -> None:
    """Write fine-tuning datasets (classification, NER, SQuAD) for a pretrained checkpoint."""


@task.command(context_settings=_PASSTHROUGH)
@_common_options
@click.option(
    "--glue",
    type=click.Choice(GLUE_NAMES),
    default=None,
    help="GLUE preset: columns, header quirks, standard labels (stsb: regression).",
)
@click.option(
    "--format",
    "input_format",
    type=click.Choice(INPUT_FORMATS),
    default=None,
    help="Input format (default: from the extension; tsv).",
)
@click.option(
    "--text-column", default=None, help="Text column: header name, JSON field, or 0-based index with --no-header."
)
@click.option("--text-pair-column", default=None, help="Second text of a pair (same forms).")
@click.option("--label-column", default=None, help="Label column (same forms).")
@click.option(
    "--header/--no-header", default=True, show_default=True, help="Whether tsv/csv files start with a header line."
)
@click.option("--regression", is_flag=True, default=False, help="Float labels (task kind 'regression').")
@click.option("--no-labels", is_flag=True, default=False, help="Unlabeled data (test files): rows without labels.")
@_label_options
@click.option("--max-seq-length", type=int, default=128, show_default=True)
@click.pass_context
def classification(
    ctx,
    inputs,
    vocab,
    output,
    split,
    lowercase,
    num_shards,
    overwrite,
    glue,
    input_format,
    text_column,
    text_pair_column,
    label_column,
    header,
    regression,
    no_labels,
    labels_text,
    label_set_from,
    max_seq_length,
) -> None:
    """Sentence (pair) classification or regression: [CLS] A [SEP] (B [SEP]) + label.

    Any other --option is a Beam pipeline option (--runner, --direct_num_workers, ...).
    """
    from pipelines.tasks.pipeline import run_classification

    _run(
        run_classification,
        inputs=list(inputs),
        vocab=vocab,
        output_dir=output,
        max_seq_length=max_seq_length,
        input_format=input_format,
        text_column=text_column,
        text_pair_column=text_pair_column,
        label_column=label_column,
        header=header,
        glue=glue,
        regression=regression,
        no_labels=no_labels,
        labels=_labels(labels_text),
        label_set_from=label_set_from,
        split=split,
        num_shards=num_shards,
        lowercase=lowercase,
        overwrite=overwrite,
        beam_args=ctx.args,
    )


@task.command(context_settings=_PASSTHROUGH)
@_common_options
@click.option(
    "--scheme",
    type=click.Choice(SCHEMES),
    default="iob2",
    show_default=True,
    help="Tagging scheme of the input (iob1 is converted to IOB2).",
)
@click.option(
    "--window-overlap",
    type=int,
    default=16,
    show_default=True,
    help="Words shared by consecutive windows of a sentence longer than --max-seq-length.",
)
@click.option(
    "--format",
    "input_format",
    type=click.Choice(["conll", "char-tag"]),
    default="conll",
    show_default=True,
    help="conll: 'token POS chunk TAG' lines; char-tag: 'char TAG' lines (Chinese NER, e.g. People's Daily).",
)
@_label_options
@click.option("--max-seq-length", type=int, default=128, show_default=True)
@click.pass_context
def ner(
    ctx,
    inputs,
    vocab,
    output,
    split,
    lowercase,
    num_shards,
    overwrite,
    scheme,
    window_overlap,
    input_format,
    labels_text,
    label_set_from,
    max_seq_length,
) -> None:
    """Named-entity recognition from CoNLL files (token POS chunk TAG) or char-tag files (char TAG).

    Any other --option is a Beam pipeline option (--runner, --direct_num_workers, ...).
    """
    from pipelines.tasks.pipeline import run_ner

    _run(
        run_ner,
        inputs=list(inputs),
        vocab=vocab,
        output_dir=output,
        max_seq_length=max_seq_length,
        scheme=scheme,
        window_overlap=window_overlap,
        input_format=input_format,
        labels=_labels(labels_text),
        label_set_from=label_set_from,
        split=split,
        num_shards=num_shards,
        lowercase=lowercase,
        overwrite=overwrite,
        beam_args=ctx.args,
    )


@task.command(context_settings=_PASSTHROUGH)
@_common_options
@click.option("--max-seq-length", type=int, default=384, show_default=True)
@click.option("--doc-stride", type=int, default=128, show_default=True, help="Tokens between context window starts.")
@click.option("--max-query-length", type=int, default=64, show_default=True)
@click.option("--articles", default=None, help="START:END: only these articles (by index) of each file, e.g. 0:40.")
@click.pass_context
def squad(
    ctx,
    inputs,
    vocab,
    output,
    split,
    lowercase,
    num_shards,
    overwrite,
    max_seq_length,
    doc_stride,
    max_query_length,
    articles,
) -> None:
    """Extractive QA from SQuAD v1.1/v2.0 JSON: features + examples.jsonl for the official metric.

    Any other --option is a Beam pipeline option (--runner, --direct_num_workers, ...).
    """
    from pipelines.tasks.pipeline import run_squad

    try:
        selection = parse_articles(articles)
    except ConfigError as e:
        raise _bad(e) from None
    _run(
        run_squad,
        inputs=list(inputs),
        vocab=vocab,
        output_dir=output,
        max_seq_length=max_seq_length,
        doc_stride=doc_stride,
        max_query_length=max_query_length,
        articles=selection,
        split=split,
        num_shards=num_shards,
        lowercase=lowercase,
        overwrite=overwrite,
        beam_args=ctx.args,
    )
