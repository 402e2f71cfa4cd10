"""``berttrain``: pretraining, export to Hugging Face, plots (and fine-tuning)."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from bertstream.cli import options
from bertstream.cli.options import click_options, config_option
from bertstream.cli.owned import NOT_WRITTEN, overwrite_option
from bertstream.cli.version import version_option
from bertstream.trainer.cli_errors import RankZeroGroup, reported
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.data.config import EvalSet
from bertstream.trainer.distributed import launched_main
from bertstream.trainer.embed import EmbedConfig
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.pretrain.plot import plot_options
from bertstream.trainer.run_config import config_help, saved_flags
from bertstream.trainer.run_folder import training_interrupted

_CTX = {"help_option_names": ["-h", "--help"], "show_default": True}


@click.group(cls=RankZeroGroup, context_settings=_CTX)
@version_option()
def main() -> None:
    """Train BERT from bertstream shards: one CPU, or GPUs and nodes under torchrun."""


@main.command(context_settings=_CTX)
@config_option(TrainConfig, lambda path: saved_flags(path, "pretrain", TrainConfig), config_help("pretrain"))
@click_options(TrainConfig)
def pretrain(**values: Any) -> None:
    """Pretrain BERT (MLM + NSP) on pretraining shards."""
    from bertstream.trainer.pretrain.loop import pretrain as run

    _refuse_evaluation_without_data(values)
    with reported(TrainConfig, training_interrupted(values.get("output"))):
        given = options.given_names(click.get_current_context(), TrainConfig)
        result = run(TrainConfig.build(**values, given=given))
    if launched_main():
        last = result.get("eval")
        shown = (
            f" (eval at step {last['step']}: mlm_loss {last['mlm_loss']:.4f}, perplexity {last['mlm_perplexity']:.2f} "
            "per masked token)"
            if last
            else ""
        )
        click.echo(f"trained to step {result['step']}: {result['run_dir']}{shown}")


def _refuse_evaluation_without_data(values: dict[str, Any]) -> None:
    """An evaluation setting (tagged ``EVALUATION``: ``--eval-every``, ``--eval-batches``) typed without
    ``--eval-data`` was dropped without a word: the run evaluated nothing. Their defaults, and values from
    ``--config``, stay quiet."""
    ctx = click.get_current_context()
    settings = options.tagged(TrainConfig, options.EVALUATION)
    typed = [p for p in settings if ctx.get_parameter_source(p) is ParameterSource.COMMANDLINE]
    problem = EvalSet.settings_without_it(" and ".join(options.flag_for(TrainConfig, p) for p in typed), values)
    if problem:
        raise click.UsageError(problem)


@main.command("export-hf", context_settings=_CTX)
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False))
@click.argument("out", type=click.Path(file_okay=False))
@overwrite_option("Replace an earlier export in OUT (a folder of other files is refused).")
def export_hf(checkpoint, out, overwrite: bool) -> None:
    """Write a checkpoint as a Hugging Face folder: pretraining as BertForPreTraining, a fine-tuning run as its task
    class (BertForSequenceClassification, ...ForTokenClassification, ...ForQuestionAnswering) that pipelines serve."""
    from bertstream.trainer.finetune.tasks import HF_HEADS
    from bertstream.trainer.hf.export import export_checkpoint

    with reported(interrupted="nothing was exported (an export is moved into OUT whole, at its end)"):
        path = export_checkpoint(checkpoint, out, heads=HF_HEADS, overwrite=overwrite)
    click.echo(f"exported {checkpoint} -> {path}")


@main.command(context_settings=_CTX)
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@plot_options
def plot(run_dirs, output, baseline_from) -> None:
    """Plot loss and MLM/NSP accuracy (train and eval) from RUN_DIR/metrics.jsonl; several RUN_DIRs are the
    phases of one training, drawn on one step axis."""
    from bertstream.trainer.pretrain.plot import plot_run, unigram_baseline  # (matplotlib: when it draws)

    with reported(interrupted="the plot was not finished"):
        baseline = unigram_baseline(baseline_from) if baseline_from is not None else None
        path = plot_run(run_dirs, output, baseline=baseline)
    click.echo(f"wrote {path}" + (f" (unigram baseline {baseline:.4f})" if baseline is not None else ""))


@main.command(context_settings=_CTX)
@config_option(FinetuneConfig, lambda path: saved_flags(path, "finetune", FinetuneConfig), config_help("finetune"))
@click_options(FinetuneConfig)
def finetune(**values: Any) -> None:
    """Fine-tune on a task dataset; evaluate every epoch, keep the best checkpoint, write results.json."""
    from bertstream.trainer.finetune.evaluation import stopped_early
    from bertstream.trainer.finetune.loop import finetune as run
    from bertstream.trainer.finetune.resume import RESUME_DIR

    out = values.get("output")
    # bad flags (exit 2); bad data or init (exit 1): a message, not a traceback
    with reported(FinetuneConfig, training_interrupted(out, out and f"{out}/{RESUME_DIR}")):
        cfg = FinetuneConfig.build(**values)
        results = run(cfg)
    if not launched_main():
        return
    best = results["best"]
    value = "n/a (unlabeled eval data)" if best["value"] is None else f"{best['value']:.4f}"
    click.echo(
        f"{stopped_early(results)}best epoch {best['epoch']} (step {best['step']}): {best['metric']} {value}; "
        f"{cfg.run_folder.run_dir / 'results.json'}, {cfg.run_folder.run_dir / best['predictions']}"
    )


@main.command(context_settings=_CTX)
@click_options(EmbedConfig)
def embed(**values: Any) -> None:
    """Extract BERT features: one vector (or one per token) per input row, written as an Arrow file."""
    from bertstream.trainer.embed import embed as run

    with reported(EmbedConfig, NOT_WRITTEN):
        cfg = options.build(EmbedConfig, **values)
        result = run(cfg)
    click.echo(
        f"embedded {result['rows']} rows ({result['width']} wide, {result['truncated']} truncated) "
        f"-> {result['output']}"
    )
