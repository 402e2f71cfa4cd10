"""``berttrain``: pretraining, export to Hugging Face, plots (and fine-tuning)."""

from __future__ import annotations

from typing import Any

import click

from trainer.cli_errors import reported
from trainer.config import TrainConfig
from trainer.finetune.config import FinetuneConfig
from trainer.options import click_options

_CTX = {"help_option_names": ["-h", "--help"], "show_default": True}


@click.group(context_settings=_CTX)
def main() -> None:
    """Train BERT from bertstream shards: one CPU, or GPUs and nodes under torchrun."""


@main.command(context_settings=_CTX)
@click_options(TrainConfig)
def pretrain(**values: Any) -> None:
    """Pretrain BERT (MLM + NSP) on pretraining shards."""
    from trainer.pretrain import pretrain as run

    with reported():
        result = run(TrainConfig.build(**values))
    click.echo(f"trained to step {result['step']}: {result['run_dir']}")


@main.command("export-hf", context_settings=_CTX)
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False))
@click.argument("out", type=click.Path(file_okay=False))
def export_hf(checkpoint, out) -> None:
    """Write a checkpoint as a Hugging Face BertForPreTraining folder (config.json, model.safetensors, vocab.txt)."""
    from trainer.hf import export_checkpoint

    with reported():
        path = export_checkpoint(checkpoint, out)
    click.echo(f"exported {checkpoint} -> {path}")


@main.command(context_settings=_CTX)
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--output", help="PNG path (default: the last RUN_DIR/curves.png).")
@click.option("--baseline-from", help="Dataset folder: draw the unigram MLM accuracy baseline computed from it.")
def plot(run_dirs, output, baseline_from) -> None:
    """Plot loss and MLM/NSP accuracy (train and eval) from RUN_DIR/metrics.jsonl; several RUN_DIRs are the
    phases of one training, drawn on one step axis."""
    from trainer.plot import plot_run, unigram_baseline

    with reported():
        baseline = unigram_baseline(baseline_from) if baseline_from else None
        path = plot_run(run_dirs, output, baseline=baseline)
    click.echo(f"wrote {path}" + (f" (unigram baseline {baseline:.4f})" if baseline is not None else ""))


@main.command(context_settings=_CTX)
@click_options(FinetuneConfig)
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier run in --output.")
def finetune(overwrite: bool, **values: Any) -> None:
    """Fine-tune on a task dataset; evaluate every epoch, keep the best checkpoint, write results.json."""
    from trainer.finetune.loop import finetune as run

    with reported():  # bad flags (exit 2); bad data, init or output folder (exit 1): a message, not a traceback
        cfg = FinetuneConfig.build(**values)
        results = run(cfg, overwrite=overwrite)
    best = results["best"]
    value = "n/a (unlabeled eval data)" if best["value"] is None else f"{best['value']:.4f}"
    click.echo(
        f"best epoch {best['epoch']} (step {best['step']}): {best['metric']} {value}; "
        f"{cfg.run.output}/results.json, {cfg.run.output}/{best['predictions']}"
    )


@main.command(context_settings=_CTX)
@click.option(
    "--init", "init", required=True, help="Our checkpoint folder (or run folder) or a Hugging Face BERT folder."
)
@click.option(
    "--input",
    "input_",
    required=True,
    help="UTF-8 text file (one text per line; blank lines are kept as empty texts) or a task dataset folder.",
)
@click.option("--output", required=True, help="Arrow IPC file to write (index, num_tokens, embedding).")
@click.option(
    "--layers", default="-1", help="Hidden states to use (0 = embeddings): -1, a slice such as -4:, or 0,3,5."
)
@click.option("--combine", type=click.Choice(["sum", "concat", "mean"]), default="mean", help="How the layers merge.")
@click.option(
    "--pooling",
    type=click.Choice(["cls", "mean", "none"]),
    default="mean",
    help="cls: the [CLS] vector; mean: over real tokens; none: every token's vector.",
)
@click.option(
    "--max-seq-length",
    type=int,
    default=None,
    help="Text files: tokens per text, [CLS] and [SEP] included  [default: 128, or the model's "
    "max_position_embeddings when smaller]",
)
@click.option("--batch-size", type=int, default=64)
@click.option("--dtype", type=click.Choice(["float16", "float32"]), default="float32")
@click.option("--device", default="auto", help="auto, cpu, cuda or cuda:N (refused when no GPU is visible).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
def embed(init, input_, output, layers, combine, pooling, max_seq_length, batch_size, dtype, device, overwrite) -> None:
    """Extract BERT features: one vector (or one per token) per input row, written as an Arrow file."""
    from trainer.embed import EmbedConfig
    from trainer.embed import embed as run

    with reported():
        cfg = EmbedConfig(
            init=init,
            input=input_,
            output=output,
            layers=layers,
            combine=combine,
            pooling=pooling,
            max_seq_length=max_seq_length,
            batch_size=batch_size,
            dtype=dtype,
            device=device,
            overwrite=overwrite,
        )
        result = run(cfg)
    click.echo(
        f"embedded {result['rows']} rows ({result['width']} wide, {result['truncated']} truncated) "
        f"-> {result['output']}"
    )
