"""``bertprep``: the preprocessing command line (vocab, pretraining, inspect, report, task)."""

from __future__ import annotations

import json
import logging
import os
import sys

import click

from configs.errors import ConfigError
from pipelines.common.formats import FORMATS, OUTPUT_FORMATS
from pipelines.pretraining.config import DEDUP_MODES, PretrainingConfig

# Flag for each config field, so a ConfigError names what the user typed.
_FLAGS = {
    "input_format": "--format",
    "max_seq_length": "--max-seq-length",
    "max_predictions_per_seq": "--max-predictions-per-seq",
    "masked_lm_prob": "--masked-lm-prob",
    "short_seq_prob": "--short-seq-prob",
    "dupe_factor": "--dupe-factor",
    "seed": "--seed",
    "num_shards": "--num-shards",
    "output_format": "--output-format",
    "docs_per_group": "--docs-per-group",
    "vocab_size": "--vocab-size",
    "sample_bytes": "--sample-bytes",
    "min_frequency": "--min-frequency",
    "arrow_compression": "--arrow-compression",
    "dedup": "--dedup",
    "dedup_ngram": "--dedup-ngram",
    "dedup_threshold": "--dedup-threshold",
}

_PASSTHROUGH = dict(ignore_unknown_options=True, allow_extra_args=True, help_option_names=["-h", "--help"])


def _quiet_beam() -> None:
    # `import apache_beam` configures root logging at WARNING and chats about optional clients.
    logging.getLogger().setLevel(logging.ERROR)
    # A failing DoFn is logged by Beam with its traceback before the error reaches us; we report it once.
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    from pipelines.common.runner import limit_malloc_arenas

    limit_malloc_arenas()


def _bad(err: Exception, param: str) -> click.UsageError:
    flag = _FLAGS.get(param, f"--{param.replace('_', '-')}")
    return click.BadParameter(str(getattr(err, "message", err)), param_hint=f"'{flag}'")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Preprocess text into BERT pretraining and fine-tuning shards with Apache Beam."""


@main.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--input", "inputs", multiple=True, required=True, help="File, glob or URL (repeatable).")
@click.option("--format", "input_format", type=click.Choice(FORMATS), default="sentences", show_default=True)
@click.option(
    "--output", required=True, type=click.Path(file_okay=False), help="Folder for vocab.txt and tokenizer.json."
)
@click.option("--vocab-size", type=int, default=30522, show_default=True)
@click.option("--lowercase/--cased", default=True, show_default=True)
@click.option("--sample-bytes", type=int, default=0, help="Train on a deterministic sample of about this many bytes.")
@click.option("--min-frequency", type=int, default=2, show_default=True)
@click.option("--seed", type=int, default=12345, show_default=True)
@click.option("--overwrite", is_flag=True, default=False, help="Replace a vocabulary already in --output.")
def vocab(inputs, input_format, output, vocab_size, lowercase, sample_bytes, min_frequency, seed, overwrite) -> None:
    """Train a WordPiece vocabulary (vocab.txt + tokenizer.json)."""
    _quiet_beam()
    from pipelines.common.cli_errors import sigterm_as_interrupt

    with sigterm_as_interrupt():
        v, counters = _train_vocab(
            list(inputs), input_format, output, vocab_size, lowercase, sample_bytes, min_frequency, seed, overwrite
        )
    click.echo(
        f"vocab: {len(v)} tokens (sha256 {v.sha256[:12]}…) from {counters.get('documents_sampled', 0)} "
        f"documents, {counters.get('bytes_read', 0) / 1e6:.1f} MB read -> {output}/vocab.txt, tokenizer.json"
    )


def _train_vocab(inputs, input_format, output, vocab_size, lowercase, sample_bytes, min_frequency, seed, overwrite):
    """Check everything, take the folder's lock, train; every failure is one ``Error:`` line."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.common.cli_errors import first_line, interrupted
    from pipelines.common.files import InputError
    from pipelines.common.inputs import resolve_inputs
    from pipelines.common.output_dir import check_no_overlap, ensure_writable_dir
    from pipelines.common.output_lock import lock_output, new_run_id
    from pipelines.common.redact import redact_logs, redact_text
    from pipelines.common.runner import UsageError
    from pipelines.vocab import VocabConfig, prepare_vocab_output, train_vocab

    redact_logs([*inputs, output])
    try:
        cfg = VocabConfig(
            input_format=input_format,
            vocab_size=vocab_size,
            lowercase=lowercase,
            sample_bytes=sample_bytes,
            min_frequency=min_frequency,
            seed=seed,
        )
    except ConfigError as e:
        raise _bad(e, e.param) from None
    FileSystems.set_options(PipelineOptions([]))  # s3:// inputs: Beam's S3 client reads its options from here
    try:
        files = resolve_inputs(inputs, cfg.input_format)
        check_no_overlap(output, {"input": [f.path for f in files]})
        ensure_writable_dir(output)  # before the training, not after it
        with lock_output(output, new_run_id(), "bertprep vocab"):
            prepare_vocab_output(output, overwrite)
            return train_vocab(inputs, output, cfg, files=files)
    except UsageError as e:
        raise click.BadParameter(redact_text(str(e)), param_hint=f"'--{e.param}'") from None
    except InputError as e:
        raise click.ClickException(redact_text(f"{e}; no vocabulary was written")) from None
    except KeyboardInterrupt:
        interrupted("no vocabulary was written")
    except OSError as e:  # a full disk, a folder removed under us: the earlier vocabulary, if any, is intact
        raise click.ClickException(
            redact_text(
                f"cannot write the vocabulary to {output}: {e.strerror or first_line(e)}; no vocabulary was written"
            )
        ) from None


@main.command(context_settings=_PASSTHROUGH)
@click.option(
    "--input", "inputs", multiple=True, required=True, help="File, glob or URL (repeatable); gz/bz2/zst by extension."
)
@click.option("--format", "input_format", type=click.Choice(FORMATS), default="sentences", show_default=True)
@click.option("--vocab", required=True, help="vocab.txt or tokenizer.json (local or URL).")
@click.option("--output", required=True, help="Output folder (local or URL).")
@click.option("--max-seq-length", type=int, default=128, show_default=True)
@click.option("--max-predictions-per-seq", type=int, default=20, show_default=True)
@click.option("--masked-lm-prob", type=float, default=0.15, show_default=True)
@click.option("--short-seq-prob", type=float, default=0.1, show_default=True)
@click.option("--dupe-factor", type=int, default=10, show_default=True)
@click.option("--seed", type=int, default=12345, show_default=True)
@click.option("--whole-word-mask", is_flag=True, default=False)
@click.option(
    "--word-segmenter",
    type=click.Choice(["rjieba", "jieba"]),
    default=None,
    help="With --whole-word-mask: words from this Chinese segmenter (pip install 'bertstream[chinese]').",
)
@click.option(
    "--lowercase/--cased", default=None, help="Casing (default: from tokenizer.json; lowercase for vocab.txt)."
)
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="arrow", show_default=True)
@click.option("--num-shards", type=int, default=0, help="Shards per format (default: from the input size).")
@click.option("--docs-per-group", type=int, default=2000, show_default=True, help="Documents per random-next pool.")
@click.option("--arrow-compression", type=click.Choice(["zstd", "lz4", "none"]), default="zstd", show_default=True)
@click.option("--keep-gutenberg", is_flag=True, default=False, help="Keep Project Gutenberg headers and licences.")
@click.option(
    "--dedup",
    type=click.Choice(DEDUP_MODES),
    default="none",
    show_default=True,
    help="Drop duplicate documents: exact (normalised text) or minhash (also near duplicates).",
)
@click.option("--dedup-ngram", type=int, default=5, show_default=True, help="Words per MinHash shingle.")
@click.option("--dedup-threshold", type=float, default=0.8, show_default=True, help="MinHash Jaccard threshold.")
@click.option("--overwrite", is_flag=True, default=False, help="Replace a dataset already in --output.")
@click.option("--verbose", is_flag=True, default=False, help="Also print a line per input file, group and shard.")
@click.pass_context
def pretraining(
    ctx,
    inputs,
    input_format,
    vocab,
    output,
    max_seq_length,
    max_predictions_per_seq,
    masked_lm_prob,
    short_seq_prob,
    dupe_factor,
    seed,
    whole_word_mask,
    word_segmenter,
    lowercase,
    output_format,
    num_shards,
    docs_per_group,
    arrow_compression,
    keep_gutenberg,
    dedup,
    dedup_ngram,
    dedup_threshold,
    overwrite,
    verbose,
) -> None:
    """Write masked-LM + next-sentence pretraining shards and a manifest.

    Any other --option is a Beam pipeline option (--runner, --direct_num_workers, --project, ...).
    The default runner is Beam's in-process FnApiRunner.
    """
    _quiet_beam()
    from pipelines.common.cli_errors import pipeline_errors
    from pipelines.common.redact import redact_logs
    from pipelines.pretraining.pipeline import run_pretraining

    redact_logs([*ctx.args, *inputs, vocab, output])
    if verbose:  # read by the stages wherever they run: this process or the worker processes it starts
        from pipelines.pretraining.progress import ENV_VERBOSE

        os.environ[ENV_VERBOSE] = "1"

    try:
        cfg = PretrainingConfig(
            input_format=input_format,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            masked_lm_prob=masked_lm_prob,
            short_seq_prob=short_seq_prob,
            dupe_factor=dupe_factor,
            seed=seed,
            whole_word_mask=whole_word_mask,
            word_segmenter=word_segmenter or "",
            lowercase=True if lowercase is None else lowercase,
            output_format=output_format,
            num_shards=num_shards,
            docs_per_group=docs_per_group,
            arrow_compression=arrow_compression,
            strip_gutenberg=not keep_gutenberg,
            dedup=dedup,
            dedup_ngram=dedup_ngram,
            dedup_threshold=dedup_threshold,
        )
    except ConfigError as e:
        raise _bad(e, e.param) from None
    with pipeline_errors():
        result = run_pretraining(
            inputs=list(inputs),
            vocab=vocab,
            output_dir=output,
            cfg=cfg,
            beam_args=ctx.args,
            overwrite=overwrite,
            lowercase=lowercase,
        )
    _print_summary(result)


def _print_summary(result) -> None:
    from pipelines.report.inspection import summary_lines

    m = result.manifest
    click.echo(
        f"done in {result.seconds:.1f} s: {result.input_bytes / 1e6:.1f} MB of input, "
        f"{result.input_bytes / 1e6 / max(result.seconds, 1e-9):.2f} MB/s, "
        f"{m.totals.get('instances', 0) / max(result.seconds, 1e-9):.0f} instances/s"
    )
    for line in summary_lines(m):
        click.echo("  " + line)
    click.echo(f"  output: {result.output_dir}/manifest.json and {len(m.shards)} shard files")


@main.command("demo-corpus", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--holdout-every", type=int, default=0, help="Put every k-th document in DIRECTORY/heldout/.")
def demo_corpus(directory, holdout_every) -> None:
    """Write Python's bundled reference documentation as a `text`-format corpus (no download needed)."""
    from pipelines.demo_corpus import write_pydoc_corpus

    paths = write_pydoc_corpus(directory, holdout_every)
    size = sum(p.stat().st_size for p in paths)
    click.echo(f"wrote {len(paths)} documents, {size / 1e6:.2f} MB -> {directory}")


@main.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("dataset_dir")
@click.option("--verify", is_flag=True, help="Re-check every shard's size, checksum, schema and row count.")
@click.option(
    "--decode", type=click.IntRange(min=0), default=0, help="Print N instances as text, masked positions marked."
)
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def inspect(dataset_dir, verify, decode, as_json) -> None:
    """Summarise a dataset folder from its manifest."""
    _quiet_beam()
    from pipelines.common.dataset_run import load_manifest
    from pipelines.report.inspection import (
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


@main.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("dataset_dir")
@click.option("--output", default=None, type=click.Path(file_okay=False), help="Report folder [default: DIR/report].")
@click.option("--top-tokens", type=int, default=30, show_default=True, help="Tokens in the most-frequent plot.")
@click.option("--top-sources", type=int, default=15, show_default=True, help="Sources shown (the rest as one).")
@click.option("--top-unk-words", type=int, default=25, show_default=True, help="[UNK] words listed.")
def report(dataset_dir, output, top_tokens, top_sources, top_unk_words) -> None:
    """Write DIR/report/index.html: plots of a pretraining dataset beside its key numbers."""
    _quiet_beam()
    from pipelines.report.data import ReportConfig
    from pipelines.report.page import write_report

    try:
        cfg = ReportConfig(top_tokens=top_tokens, top_sources=top_sources, top_unk_words=top_unk_words)
    except ConfigError as e:
        raise _bad(e, e.param) from None
    try:
        index = write_report(dataset_dir, output, cfg)
    except ModuleNotFoundError as e:
        if e.name != "matplotlib" and not str(e.name or "").startswith("matplotlib."):
            raise
        raise click.ClickException(
            "bertprep report draws its plots with matplotlib, a dependency of bertstream that is missing "
            "from this environment: pip install matplotlib (or reinstall bertstream)"
        ) from None
    except (FileNotFoundError, ValueError, OSError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"report: {index}")


# Imported last and with Beam's import-time warnings muted: the task commands pull in apache_beam.
logging.getLogger().setLevel(logging.ERROR)
from pipelines.tasks.cli import task  # noqa: E402

main.add_command(task)
