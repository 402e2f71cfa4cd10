"""``berttrain``: pretraining, export to Hugging Face, plots (and fine-tuning)."""

from __future__ import annotations

import click

from trainer.cli_errors import reported
from trainer.config import TrainConfig

_CTX = {"help_option_names": ["-h", "--help"], "show_default": True}


@click.group(context_settings=_CTX)
def main() -> None:
    """Train BERT from bertstream shards: one CPU, or GPUs and nodes under torchrun."""


@main.command(context_settings=_CTX)
@click.option(
    "--data",
    "data",
    multiple=True,
    required=True,
    help="Dataset folder with a manifest.json (repeatable; local or URL). DIR:WEIGHT on every --data mixes "
    "the folders by weight instead of reading them as one dataset.",
)
@click.option("--eval-data", help="Evaluation dataset folder.")
@click.option(
    "--model",
    type=click.Choice(["tiny", "mini", "small", "medium", "base", "large"]),
    default="tiny",
    help="Preset (L2/H128 .. L24/H1024); vocab size from the data.",
)
@click.option(
    "--model-config",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON of BertConfig fields overriding the preset.",
)
@click.option(
    "--init-from", type=click.Path(exists=True, file_okay=False), help="Start from a Hugging Face BERT folder."
)
@click.option("--dropout", type=float, help="Hidden and attention dropout (default: the model's, 0.1 for the presets).")
@click.option("--output", required=True, help="Run folder: metrics.jsonl, checkpoints/, tensorboard/.")
@click.option("--batch-size", type=int, default=32, help="Sequences per device and micro-step.")
@click.option("--grad-accum", type=int, default=1)
@click.option("--lr", type=float, default=1e-4)
@click.option("--warmup-steps", type=int, default=1000)
@click.option("--max-steps", type=int, default=10000, help="Also the end of the linear decay.")
@click.option("--max-minutes", type=float, default=0.0, help="Stop early (evaluate, checkpoint) after this wall time.")
@click.option("--optimizer", type=click.Choice(["adamw", "lamb"]), default="adamw")
@click.option("--weight-decay", type=float, default=0.01)
@click.option("--max-grad-norm", type=float, default=1.0)
@click.option(
    "--precision",
    type=click.Choice(["auto", "fp32", "bf16"]),
    default="auto",
    help="auto: bf16 autocast on CUDA, fp32 on CPU.",
)
@click.option("--compile", "compile_", is_flag=True, help="torch.compile the model.")
@click.option("--seed", type=int, default=0)
@click.option("--log-every", type=int, default=10)
@click.option("--eval-every", type=int, default=500)
@click.option("--eval-batches", type=int, default=50)
@click.option("--checkpoint-every", type=int, default=1000)
@click.option("--keep-checkpoints", type=int, default=3)
@click.option(
    "--resume", default="auto", help="auto (newest valid checkpoint in --output), none, or a checkpoint folder."
)
@click.option(
    "--reset-optimizer", is_flag=True, help="With --resume PATH: take the weights only (second training phase)."
)
@click.option("--overwrite", is_flag=True, help="Clear a non-empty --output whole and start a new run there.")
@click.option("--num-workers", type=int, default=2, help="Data-loader worker processes per rank.")
@click.option("--format", "data_format", type=click.Choice(["auto", "arrow", "webdataset"]), default="auto")
@click.option("--skip-corrupt", is_flag=True, help="Skip (and count) shards whose checksum fails instead of stopping.")
@click.option("--deterministic", is_flag=True, help="torch.use_deterministic_algorithms(True).")
@click.option("--no-tensorboard", is_flag=True)
@click.option("--device", default="auto", help="auto, cpu, cuda or cuda:N (refused when no GPU is visible).")
@click.option(
    "--masking",
    type=click.Choice(["static", "dynamic"]),
    default="static",
    help="static: the shards' masks; dynamic: fresh masks per epoch from the same shards.",
)
@click.option("--mlm-probability", type=float, default=0.15, help="Dynamic masking: share of tokens predicted.")
@click.option("--max-predictions", type=int, help="Dynamic masking: most predictions per sequence (default: no cap).")
@click.option("--whole-word-mask", is_flag=True, help="Dynamic masking: mask whole words (a token and its ## pieces).")
@click.option("--no-nsp", is_flag=True, help="Train MLM only: NSP labels are ignored, its loss is not computed.")
def pretrain(
    data,
    eval_data,
    model,
    model_config,
    init_from,
    dropout,
    output,
    batch_size,
    grad_accum,
    lr,
    warmup_steps,
    max_steps,
    max_minutes,
    optimizer,
    weight_decay,
    max_grad_norm,
    precision,
    compile_,
    seed,
    log_every,
    eval_every,
    eval_batches,
    checkpoint_every,
    keep_checkpoints,
    resume,
    reset_optimizer,
    overwrite,
    num_workers,
    data_format,
    skip_corrupt,
    deterministic,
    no_tensorboard,
    device,
    masking,
    mlm_probability,
    max_predictions,
    whole_word_mask,
    no_nsp,
) -> None:
    """Pretrain BERT (MLM + NSP) on pretraining shards."""
    from trainer.pretrain import pretrain as run

    with reported():
        cfg = TrainConfig(
            data=tuple(data),
            eval_data=eval_data,
            model=model,
            model_config=model_config,
            init_from=init_from,
            dropout=dropout,
            output=output,
            batch_size=batch_size,
            grad_accum=grad_accum,
            lr=lr,
            warmup_steps=warmup_steps,
            max_steps=max_steps,
            max_minutes=max_minutes,
            optimizer=optimizer,
            weight_decay=weight_decay,
            max_grad_norm=max_grad_norm,
            precision=precision,
            compile=compile_,
            seed=seed,
            log_every=log_every,
            eval_every=eval_every,
            eval_batches=eval_batches,
            checkpoint_every=checkpoint_every,
            keep_checkpoints=keep_checkpoints,
            resume=resume,
            reset_optimizer=reset_optimizer,
            overwrite=overwrite,
            num_workers=num_workers,
            data_format=data_format,
            skip_corrupt=skip_corrupt,
            deterministic=deterministic,
            tensorboard=not no_tensorboard,
            device=device,
            masking=masking,
            mlm_probability=mlm_probability,
            max_predictions=max_predictions,
            whole_word_mask=whole_word_mask,
            no_nsp=no_nsp,
        )
        result = run(cfg)
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
@click.option(
    "--task",
    type=click.Choice(["classification", "regression", "ner", "squad"]),
    required=True,
    help="Task kind; must match the datasets' manifests.",
)
@click.option("--train-data", required=True, help="Training task dataset folder (bertprep task; local or URL).")
@click.option("--eval-data", required=True, help="Evaluation task dataset folder (same vocab and label list).")
@click.option(
    "--init",
    "init",
    required=True,
    help="Our checkpoint folder (or run folder: its newest checkpoint), a Hugging Face BERT folder, "
    "or random:PRESET (tiny, mini, small, medium, base, large) over the data's vocabulary.",
)
@click.option("--output", required=True, help="Run folder: results.json, predictions, metrics.jsonl, checkpoints/.")
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier run in --output.")
@click.option(
    "--resume",
    type=click.Choice(["auto", "none"]),
    default="none",
    help="auto: continue the run in --output from the end of its latest epoch (after a kill, the same metrics).",
)
@click.option("--epochs", type=int, default=3)
@click.option("--dropout", type=float, help="Hidden and attention dropout (default: the init's own setting).")
@click.option("--lr", type=float, default=5e-5)
@click.option("--batch-size", type=int, default=32, help="Rows per device and step.")
@click.option("--eval-batch-size", type=int, default=0, help="0: twice --batch-size.")
@click.option("--warmup-ratio", type=float, default=0.1, help="Linear warmup over this fraction of all steps.")
@click.option("--weight-decay", type=float, default=0.01)
@click.option("--max-grad-norm", type=float, default=1.0)
@click.option("--max-steps", type=int, default=0, help="> 0: train this many steps (overrides --epochs).")
@click.option("--seed", type=int, default=0)
@click.option(
    "--precision",
    type=click.Choice(["auto", "fp32", "bf16"]),
    default="auto",
    help="auto: bf16 autocast on CUDA, fp32 on CPU.",
)
@click.option("--num-workers", type=int, default=0, help="Data-loader worker processes per rank.")
@click.option("--log-every", type=int, default=50)
@click.option("--max-answer-length", type=int, default=30, help="SQuAD: longest answer span in tokens.")
@click.option("--n-best", type=int, default=20, help="SQuAD: start/end candidates per window.")
@click.option("--no-tensorboard", is_flag=True)
@click.option("--device", default="auto", help="auto, cpu, cuda or cuda:N (refused when no GPU is visible).")
def finetune(
    task,
    train_data,
    eval_data,
    init,
    output,
    overwrite,
    resume,
    epochs,
    dropout,
    lr,
    batch_size,
    eval_batch_size,
    warmup_ratio,
    weight_decay,
    max_grad_norm,
    max_steps,
    seed,
    precision,
    num_workers,
    log_every,
    max_answer_length,
    n_best,
    no_tensorboard,
    device,
) -> None:
    """Fine-tune on a task dataset; evaluate every epoch, keep the best checkpoint, write results.json."""
    from trainer.finetune.config import FinetuneConfig
    from trainer.finetune.loop import finetune as run

    with reported():  # bad flags (exit 2); bad data, init or output folder (exit 1): a message, not a traceback
        cfg = FinetuneConfig(
            task=task,
            train_data=train_data,
            eval_data=eval_data,
            init=init,
            output=output,
            epochs=epochs,
            dropout=dropout,
            lr=lr,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            warmup_ratio=warmup_ratio,
            weight_decay=weight_decay,
            max_grad_norm=max_grad_norm,
            max_steps=max_steps,
            seed=seed,
            precision=precision,
            num_workers=num_workers,
            log_every=log_every,
            max_answer_length=max_answer_length,
            n_best=n_best,
            tensorboard=not no_tensorboard,
            device=device,
            resume=resume,
        )
        results = run(cfg, overwrite=overwrite)
    best = results["best"]
    value = "n/a (unlabeled eval data)" if best["value"] is None else f"{best['value']:.4f}"
    click.echo(
        f"best epoch {best['epoch']} (step {best['step']}): {best['metric']} {value}; "
        f"{output}/results.json, {output}/{best['predictions']}"
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
