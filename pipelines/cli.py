"""``bertprep``: the preprocessing command line (vocab, pretraining, inspect, report, task)."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import click

from bertstream.cli import options
from bertstream.cli.errors import UsageError, check
from bertstream.cli.options import click_options, single_option
from bertstream.cli.process import QuickExitGroup
from bertstream.cli.version import version_option
from bertstream.pipelines.extract_config import ExtractJob
from bertstream.pipelines.pretraining.config import PretrainingJob
from bertstream.pipelines.runners.cli_setup import HELP, PASSTHROUGH, quiet_beam
from bertstream.pipelines.vocab_config import VocabJob


@click.group(cls=QuickExitGroup, context_settings=HELP)  # a program run skips the interpreter's teardown
@version_option()
def main() -> None:
    """Preprocess text into BERT pretraining and fine-tuning shards with Apache Beam."""


@main.command(context_settings=HELP)
@click_options(VocabJob)
def vocab(**values: Any) -> None:
    """Train a WordPiece vocabulary (vocab.txt + tokenizer.json)."""
    quiet_beam()
    from bertstream.pipelines.runners.cli_errors import bertprep_errors

    with bertprep_errors(VocabJob, "no vocabulary was written"):
        job = options.build(VocabJob, **values)
        v, counters = _train_vocab(job)
    from bertstream.pipelines.common.counters import dropped_text

    drops = dropped_text(counters)  # documents the readers dropped (no text field, malformed): never silent
    click.echo(
        f"vocab: {len(v)} tokens (sha256 {v.sha256[:12]}…) from {counters.get('documents_sampled', 0)} "
        f"documents, {counters.get('bytes_read', 0) / 1e6:.1f} MB read"
        + (f", dropped ({drops})" if drops else "")
        + f" -> {job.output}/vocab.txt, tokenizer.json"
    )
    if counters.get("vocab_long_words"):
        from bertstream.schemas.wordpiece import MAX_WORD_CHARS

        click.echo(
            f"note: {counters['vocab_long_words']:,} words of more than {MAX_WORD_CHARS} characters were left out "
            "of training (WordPiece tokenizes each as one [UNK], whatever the vocabulary)"
        )
    if len(v) < job.config.vocab_size:
        # WordPiece stops when no pair is left to merge: a small corpus cannot fill a large vocabulary, and a
        # model built for --vocab-size tokens would carry rows no id reaches.
        click.echo(
            f"note: {len(v):,} of the {job.config.vocab_size:,} tokens --vocab-size asked: all that this text yields "
            f"with --min-frequency {job.config.min_frequency} (more text, or a lower --min-frequency, gives more); "
            "berttrain sizes its model from vocab.txt, not from --vocab-size"
        )


def _train_vocab(job: VocabJob):
    """Check everything, take the folder's lock, train (inside the command's funnel)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertstream.pipelines.common.redact import redact_logs
    from bertstream.pipelines.runners.reach import probe_stores
    from bertstream.pipelines.vocab import train_vocab_job

    redact_logs([*job.inputs, job.output])
    FileSystems.set_options(PipelineOptions([]))  # s3:// inputs: Beam's S3 client reads its options from here
    probe_stores({"input": list(job.inputs), "output": [job.output]})
    return train_vocab_job(job)


@main.command(context_settings=PASSTHROUGH)
@click_options(PretrainingJob)
@click.pass_context
def pretraining(ctx: click.Context, **values: Any) -> None:
    """Write masked-LM + next-sentence pretraining shards and a manifest.

    Any other --option is a Beam pipeline option (--runner, --direct_num_workers, --project, ...).
    The default runner is Beam's in-process FnApiRunner.
    """
    quiet_beam()
    from bertstream.pipelines.common.redact import redact_logs
    from bertstream.pipelines.pretraining.pipeline import run_pretraining
    from bertstream.pipelines.runners.cli_errors import bertprep_errors

    redact_logs([*ctx.args, *values["inputs"], values["vocab"], values["output"]])
    with bertprep_errors(PretrainingJob):
        job = options.build(PretrainingJob, **values, beam_args=ctx.args)
        if ctx.get_parameter_source("arrow_compression") == click.core.ParameterSource.COMMANDLINE:
            # a setting that does nothing is refused, not recorded as though it had been used
            check(
                "arrow" in job.config.formats,
                "arrow_compression",
                f"--output-format {job.config.output_format} writes no Arrow shards: drop --arrow-compression",
            )
        if job.verbose:  # read by the stages wherever they run: this process or the worker processes it starts
            from bertstream.pipelines.common.progress import ENV_VERBOSE

            os.environ[ENV_VERBOSE] = "1"
        result = run_pretraining(job)
    _print_summary(result)


@main.command(context_settings=PASSTHROUGH)
@click_options(ExtractJob)
@click.pass_context
def extract(ctx: click.Context, **values: Any) -> None:
    """Write the documents any input yields, read and cleaned, as JSON lines {"id", "title", "text"}.

    Any other --option is a Beam pipeline option (--runner, --direct_num_workers, ...).
    """
    quiet_beam()
    from bertstream.pipelines.common.counters import altered_text, dropped_text
    from bertstream.pipelines.common.redact import redact_logs
    from bertstream.pipelines.extract import run_extract
    from bertstream.pipelines.runners.cli_errors import bertprep_errors

    redact_logs([*ctx.args, *values["inputs"], values["output"]])
    with bertprep_errors(ExtractJob):
        result = run_extract(options.build(ExtractJob, **values, beam_args=ctx.args))
    m, c = result.manifest, result.manifest.counters
    drops = dropped_text(c)
    click.echo(
        f"done in {result.seconds:.1f} s: {result.input_bytes / 1e6:.1f} MB of input; documents: "
        f"{c.get('documents_read', 0)} read, {m.totals['documents']} written"
        + (f", dropped ({drops})" if drops else "")
    )
    if altered_text(c):
        click.echo(f"  altered: {altered_text(c)}")
    click.echo(f"  output: {result.output_dir}/manifest.json and {len(m.shards)} files of JSON lines")


def _print_summary(result) -> None:
    from bertstream.pipelines.report.inspection import manifest_warning, summary_lines

    m = result.manifest
    # The run's own time and rate, as its run: line below says them: the rate computed again here from the
    # rounded seconds differed from it in its last digit now and then.
    seconds = m.run.get("seconds") or result.seconds
    rate = m.run.get("input_mb_per_s", result.input_bytes / 1e6 / max(seconds, 1e-9))
    click.echo(
        f"done in {seconds:.1f} s: {result.input_bytes / 1e6:.1f} MB of input, {rate:.2f} MB/s, "
        f"{m.totals.get('instances', 0) / max(seconds, 1e-9):.0f} instances/s"
    )
    for line in summary_lines(m):
        click.echo("  " + line)
    click.echo(f"  output: {result.output_dir}/manifest.json and {len(m.shards)} shard files")
    if m.parameters.get("split") == "train":  # --eval-fraction: the held-out documents' dataset beside it
        from bertstream.pipelines.common.dataset import load_manifest
        from bertstream.pipelines.pretraining.pipeline import eval_dir

        held = load_manifest(eval_dir(result.output_dir))
        click.echo(
            f"  held out: {held.counters.get('documents_read', 0)} documents, {held.totals.get('instances', 0)} "
            f"instances: {eval_dir(result.output_dir)}/manifest.json and {len(held.shards)} shard files"
        )
    warning = manifest_warning(m)  # last, where it is seen: the run succeeded on data it likely misread
    if warning:
        click.echo(warning)


@main.command("demo-corpus", context_settings=HELP)
@click.argument("directory", type=click.Path(file_okay=False))
@single_option("--holdout-every", type=int, default=0, help="Put every k-th document in DIRECTORY/heldout/.")
def demo_corpus(directory, holdout_every) -> None:
    """Write Python's bundled reference documentation as a `text`-format corpus (no download needed)."""
    from bertstream.pipelines.demo_corpus import write_pydoc_corpus
    from bertstream.pipelines.runners.cli_errors import bertprep_errors

    with bertprep_errors(None, "the corpus is incomplete"):
        try:
            paths = write_pydoc_corpus(directory, holdout_every)
        except UsageError as e:
            if e.param != "directory":
                raise
            raise click.BadParameter(e.message, param_hint="'DIRECTORY'") from None
    size = sum(p.stat().st_size for p in paths)
    click.echo(f"wrote {len(paths)} documents, {size / 1e6:.2f} MB -> {directory}")


@main.command(context_settings=HELP)
@click.argument("dataset_dir")
@single_option("--verify", is_flag=True, help="Re-check every shard's size, checksum, schema and row count.")
@single_option(
    "--decode", type=click.IntRange(min=0), default=0, help="Print N instances as text, masked positions marked."
)
@single_option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def inspect(dataset_dir, verify, decode, as_json) -> None:
    """Summarise a dataset folder from its manifest."""
    quiet_beam()
    from bertstream.pipelines.runners.cli_errors import bertprep_errors

    with bertprep_errors(None, "nothing was checked"):
        _object_stores_ready({"dataset_dir": [dataset_dir]})
        _inspect(dataset_dir, verify, decode, as_json)


def _object_stores_ready(paths: dict[str, list[str]]) -> None:
    """``inspect`` and ``report`` take no Beam options, so Beam's filesystems had none: an ``s3://`` dataset was
    refused on every read ('Must provide one of client or options'), even one bertprep had just written there.
    A URL gets what a run's do (:func:`~bertstream.pipelines.runners.runner.pipeline_options`): the filesystems'
    options (the endpoint and credentials from the environment) and its server probed with a deadline."""
    if any("://" in p for values in paths.values() for p in values if p):
        from bertstream.pipelines.runners.runner import pipeline_options

        try:
            pipeline_options([], paths)
        except UsageError as e:
            if e.param != "dataset_dir":
                raise
            raise click.BadParameter(e.message, param_hint="'DATASET_DIR'") from None


def _inspect(dataset_dir: str, verify: bool, decode: int, as_json: bool) -> None:
    from bertstream.pipelines.common.dataset import load_manifest
    from bertstream.pipelines.report.inspection import (
        DatasetError,
        decode_instance,
        load_vocab,
        read_instances,
        summary_lines,
        verify_shard,
    )

    try:
        manifest = load_manifest(dataset_dir)
    except (FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(
            json.dumps(
                {"statistics": manifest.statistics, "counters": manifest.counters, "totals": manifest.totals}, indent=2
            )
        )
    else:
        for line in summary_lines(manifest):
            click.echo(line)
    failed = 0
    if verify:
        for shard in manifest.shards:
            check = verify_shard(dataset_dir, shard, manifest)
            failed += not check.ok
            status = "ok" if check.ok else "FAILED: " + "; ".join(check.problems)
            click.echo(f"verify {shard.path}: {shard.count} rows, {shard.bytes} bytes: {status}", err=as_json)
        click.echo(f"verify: {len(manifest.shards) - failed}/{len(manifest.shards)} shards ok", err=as_json)
        try:
            if manifest.vocab:  # bertprep extract's documents have none
                load_vocab(dataset_dir, manifest)
                click.echo(f"verify {manifest.vocab.get('file', 'vocab.txt')}: ok", err=as_json)
        except DatasetError as e:
            failed += 1
            click.echo(f"verify {manifest.vocab.get('file', 'vocab.txt')}: FAILED: {e}", err=as_json)
    if decode:
        if manifest.kind != "pretraining":
            raise click.ClickException(f"--decode shows pretraining instances; this dataset is {manifest.kind!r}")
        try:
            vocab = load_vocab(dataset_dir, manifest)
        except DatasetError as e:
            raise click.ClickException(f"--decode: {e}") from None
        for inst in read_instances(dataset_dir, manifest, decode):
            click.echo(decode_instance(inst, vocab))
    if failed:
        sys.exit(1)


@main.command(context_settings=HELP)
@click.argument("dataset_dir")
@single_option("--output", default=None, type=click.Path(file_okay=False), help="Report folder [default: DIR/report].")
@single_option("--top-tokens", type=int, default=30, show_default=True, help="Tokens in the most-frequent plot.")
@single_option("--top-sources", type=int, default=15, show_default=True, help="Sources shown (the rest as one).")
@single_option("--top-unk-words", type=int, default=25, show_default=True, help="[UNK] words listed.")
def report(dataset_dir, output, top_tokens, top_sources, top_unk_words) -> None:
    """Write DIR/report/index.html: plots of a pretraining dataset beside its key numbers."""
    quiet_beam()
    from bertstream.pipelines.report.data import ReportConfig
    from bertstream.pipelines.report.page import write_report
    from bertstream.pipelines.runners.cli_errors import bertprep_errors

    with bertprep_errors(ReportConfig, "no report was written"):
        _object_stores_ready({"dataset_dir": [dataset_dir]})  # --output is a local folder (checked by the report)
        cfg = ReportConfig(top_tokens=top_tokens, top_sources=top_sources, top_unk_words=top_unk_words)
        try:
            index = write_report(dataset_dir, output, cfg)
        except UsageError:
            raise
        except (FileNotFoundError, ValueError) as e:
            raise click.ClickException(str(e)) from None
    click.echo(f"report: {index}")


# Imported last and with Beam's import-time warnings muted: the task commands pull in apache_beam.
logging.getLogger().setLevel(logging.ERROR)
from bertstream.pipelines.tasks.cli import task  # noqa: E402

main.add_command(task)
