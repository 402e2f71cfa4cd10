"""Configuration of a pretraining run: frozen sections (data, model, optimiser, checkpoints, run, objective),
validated on construction, saved with every checkpoint. Each field carries its flag's help and default
(``bertstream.cli.options`` makes the CLI from them); model presets live in ``bertstream.trainer.model_config``. ``RunConfig`` and
``OptimConfig`` are shared with fine-tuning (``bertstream.trainer.finetune.config``), which overrides some defaults."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from bertstream.cli import options
from bertstream.cli.errors import UsageError, check
from bertstream.cli.machine import check_processes
from bertstream.cli.options import EVALUATION, FIXED, PER_NODE, opt, section
from bertstream.trainer.checks import check_finite, check_ints
from bertstream.trainer.data.config import PER_EVALUATION_HELP, DataConfig, EvalSet
from bertstream.trainer.model_choice import ModelChoice
from bertstream.trainer.optim.advice import LR_HELP
from bertstream.trainer.optim.schedule import Schedule
from bertstream.trainer.optim.table import LR_SCHEDULES, OWN_SETTINGS_HELP, own_settings
from bertstream.trainer.optim.table import OPTIMIZERS as OPTIMIZER_TABLE
from bertstream.trainer.run_folder import NEW_PHASE_HELP, NEW_PHASE_NEEDS, RunFolder
from bertstream.trainer.seeds import Seeds
from bertstream.trainer.trackers import check_installed, parse_report_to

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
OPTIMIZERS = tuple(OPTIMIZER_TABLE)  # one table for both commands (trainer.optim.table)
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_dist_timeout(seconds: float) -> None:
    """``--dist-timeout`` (pretraining and fine-tuning): torch keeps it as a timedelta: 1e300 s overflowed it (a
    traceback at launch), 1e-300 was 0 s."""
    ok = MIN_TIMEOUT_S <= seconds <= MAX_TIMEOUT_S
    check(ok, "dist_timeout", f"must be in [{MIN_TIMEOUT_S:g}, {MAX_TIMEOUT_S:g}] seconds, got {seconds}")


def waited(timeout_s: float) -> str:
    """How long a rank waits for its peers, as the notes and errors of the distributed run name it (the flag's
    words live with its declaration): ``--dist-timeout 300 s``."""
    return f"--dist-timeout {timeout_s:g} s"


FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max
# How long a rank waits for its peers in one collective before the run ends (--dist-timeout): long enough for a
# checkpoint write or an evaluation on another rank, far below gloo's and NCCL's 30 minutes of silence.
DEFAULT_TIMEOUT_S = 300.0
MAX_SEED = (1 << 32) - 1  # --seed of both commands
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 1.0, 7 * 86400.0  # --dist-timeout: a second .. a week


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceConfig:
    """``--device``, declared once: what a process computes on. The run section of pretraining and fine-tuning is
    one (:class:`RunConfig`), ``embed`` holds it as its own section; ``distributed.setup_run`` and ``setup_on``
    read it, no command does."""

    device: str = opt("auto", "auto, cpu, cuda or cuda:N (refused when no GPU is visible).", tags=(PER_NODE,))

    def __post_init__(self) -> None:
        # only what the trainer can run on (another name must not silently fall back to the CPU)
        check(
            isinstance(self.device, str) and _DEVICE.fullmatch(self.device) is not None,
            "device",
            f"must be auto, cpu, cuda or cuda:N, got {self.device!r}",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig(DeviceConfig):
    """How a run logs, and what it runs on (pretraining and fine-tuning; where it writes: its ``RunFolder``;
    ``--device`` is :class:`DeviceConfig`'s, listed after ``--report-to``)."""

    seed: int = opt(0, tags=(FIXED,))
    precision: str = opt(
        "auto",
        "auto: bf16 autocast on a CUDA GPU that has it (Ampere on), else fp32; fp16: autocast with loss scaling, "
        "for GPUs without bf16 (V100, T4; refused on the CPU).",
        choices=PRECISIONS,
    )
    log_every: int = opt(10)
    tensorboard: bool = opt(True, flag="--no-tensorboard", negate=True)
    report_to: str = opt(
        "tensorboard",
        "Trackers the metrics go to besides metrics.jsonl, comma-separated: tensorboard, mlflow (MLFLOW_TRACKING_URI; "
        "default RUN/mlruns), wandb (WANDB_PROJECT, WANDB_MODE=offline); none: metrics.jsonl only. mlflow and wandb "
        "are optional extras: pip install 'bertstream[mlflow]' / 'bertstream[wandb]'.",
    )
    async_checkpoint: bool = opt(
        True,
        "Write checkpoints in the background from a copy in host memory: the loop pays the copy only.",
        flag="--async-checkpoint/--no-async-checkpoint",
    )
    threads: int = opt(
        0,
        "Intra-op CPU threads per rank; 0: OMP_NUM_THREADS if set, else the cores this rank may use (its share of "
        "the node's under torchrun).",
        tags=(PER_NODE,),
    )
    # Both commands' (distributed.setup_run reads it with --device); a lone rank of a fine-tuning launch once
    # waited the default 300 s in silence, its error naming a flag fine-tuning lacked.
    dist_timeout: float = opt(
        DEFAULT_TIMEOUT_S, "Seconds a rank waits for its peers (torchrun) before the run ends naming the silent rank."
    )

    def __post_init__(self) -> None:
        check_ints(self, ("log_every",), 1)
        check_ints(self, ("seed", "threads"), 0)
        check_processes("threads", self.threads, per_rank=True)
        # The seed is combined with ranks, epochs and steps into torch's 64-bit seeds (seeds.Seeds: dropout, the
        # loader's epoch generator): 2**63 - 1 overflowed there, in a traceback after the model was built.
        check(self.seed <= MAX_SEED, "seed", f"must be at most 2**32 - 1, got {self.seed!r}")
        check(self.precision in PRECISIONS, "precision", f"must be one of {PRECISIONS}, got {self.precision!r}")
        check(
            not (self.precision == "fp16" and self.device == "cpu"),
            "precision",
            "fp16 needs a CUDA GPU (its loss scaling is for GPUs without bf16): use fp32 or bf16 with --device cpu",
        )
        DeviceConfig.__post_init__(self)  # (zero-argument super() fails in slotted dataclasses on 3.11)
        check_dist_timeout(self.dist_timeout)
        check_installed(self.trackers)

    @property
    def seeds(self) -> Seeds:
        """Every random stream of the run, derived from ``--seed`` (the model, the data order, dropout)."""
        return Seeds(self.seed)

    @property
    def trackers(self) -> tuple[str, ...]:
        """The trackers the run reports to: ``--report-to``, less TensorBoard under ``--no-tensorboard``."""
        return tuple(n for n in parse_report_to(self.report_to) if self.tensorboard or n != "tensorboard")


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimConfig:
    """The optimizer both commands build (``bertstream.trainer.optim.table``) and its settings."""

    lr: float = opt(1e-4, LR_HELP, tags=(FIXED,))
    weight_decay: float = opt(0.01, tags=(FIXED,))
    adam_eps: float = opt(1e-6, cli=False, tags=(FIXED,))  # BERT's
    max_grad_norm: float = opt(1.0, tags=(FIXED,))
    optimizer: str = opt(OPTIMIZERS[0], choices=OPTIMIZERS, tags=(FIXED,))
    lr_schedule: str = opt(
        "linear",
        "After warm-up: linear (decay to 0 at the run's last step), cosine (half a cosine to 0 at the last step, as "
        "Hugging Face's cosine) or wsd (warm-up-stable-decay: the peak rate until the last 20% of the run, then a "
        "linear decay to 0).",
        choices=LR_SCHEDULES,
        tags=(FIXED,),
    )
    optimizer_settings: str | None = opt(
        None,
        OWN_SETTINGS_HELP,
        tags=(FIXED,),
    )

    def __post_init__(self) -> None:
        check_finite(self)
        check(
            self.lr_schedule in LR_SCHEDULES, "lr_schedule", f"must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}"
        )
        check(self.optimizer in OPTIMIZERS, "optimizer", f"must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        try:
            own_settings(self.optimizer, self.optimizer_settings)
        except ValueError as e:
            raise UsageError("optimizer_settings", str(e)) from None
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        # the optimizer computes in float32: a larger rate overflowed inside its first step (a traceback)
        check(self.lr <= FLOAT32_MAX, "lr", f"must be at most {FLOAT32_MAX:.4g} (a float32), got {self.lr}")
        check(0 <= self.weight_decay < 1, "weight_decay", f"must be in [0, 1), got {self.weight_decay}")
        check(self.adam_eps > 0, "adam_eps", f"must be > 0, got {self.adam_eps}")
        check(self.max_grad_norm > 0, "max_grad_norm", f"must be > 0, got {self.max_grad_norm}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PretrainOptim(OptimConfig):
    warmup_steps: int = opt(1000, tags=(FIXED,))

    def __post_init__(self) -> None:
        OptimConfig.__post_init__(self)  # (zero-argument super() fails in slotted dataclasses on 3.11)
        check(self.warmup_steps >= 0, "warmup_steps", f"must be >= 0, got {self.warmup_steps}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointConfig:
    checkpoint_every: int = opt(1000)
    keep_checkpoints: int = opt(3)
    reset_optimizer: bool = opt(False, NEW_PHASE_HELP)

    def __post_init__(self) -> None:
        check_ints(self, ("checkpoint_every",), 1)
        check(self.keep_checkpoints >= 1, "keep_checkpoints", f"must be >= 1, got {self.keep_checkpoints}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectiveConfig:
    """What pretraining predicts besides the masks: NSP. (The masks, the shards' own or drawn afresh per epoch,
    are the loader's: the masking settings are declared once, in ``trainer.data.config.DataConfig``.)"""

    no_nsp: bool = opt(False, "Train MLM only: NSP labels are ignored, its loss is not computed.", tags=(FIXED,))

    @property
    def nsp(self) -> bool:
        """Whether NSP is trained: what the step and the evaluations ask the model's forward for, and whether
        DDP must allow parameters without a gradient (the NSP head's, when it is not)."""
        return not self.no_nsp


def _batch(*factors: int) -> str:
    product = 1
    for f in factors:
        product *= f
    return " x ".join(map(str, factors)) + f" = {product}"


def warmup_note(warmup: int, total: int) -> str | None:
    """One line when the warm-up does not end before the run does: the rate never gets to ``--lr`` (a 30-step
    trial under the default 1,000 warm-up steps trains at 3% of it and looks as if it learned nothing). A warning,
    not a rescaled warm-up: the flag keeps its meaning, and a resumed run its schedule."""
    if total <= 0 or warmup < total:
        return None
    return (
        f"warning: --warmup-steps {warmup} >= --max-steps {total}: the whole run is warm-up, the learning rate "
        f"reaches {total / warmup:.0%} of --lr and never decays (a tenth of the run: --warmup-steps {max(1, total // 10)})"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceBatch:
    """The batch a process reads at a time, ``--batch-size``, declared once for the three commands, each with its
    default and help (``section(DeviceBatch, ...)``): pretraining's sequences per micro-step (the loader's, linked
    into its data section), fine-tuning's rows per batch (kept on resume), embed's rows per forward pass. Checked
    here; the runs take it as their :class:`Steps`, embed as :meth:`chunks`."""

    batch_size: int = opt(32, "Sequences per device and micro-step.")

    def __post_init__(self) -> None:
        check_ints(self, ("batch_size",), 1)

    def chunks(self, rows: int) -> list[slice]:
        """Rows ``0 .. rows - 1`` as consecutive batches, the last one smaller when they do not divide."""
        return [slice(start, start + self.batch_size) for start in range(0, rows, self.batch_size)]


@dataclass(frozen=True, slots=True)
class Steps:
    """How a run's optimizer steps are made and how many it takes: ``--batch-size``, ``--grad-accum``,
    ``--max-steps`` and ``--eval-every``, made once from the config (``TrainConfig.steps``; fine-tuning's
    ``FinetuneConfig.steps`` is a ``FinetuneSteps``). The loops, the inputs, resume and the evaluations ask it and
    read none of those fields; what the run tells the user about them (which flag to change) is said here:
    pretraining's here, fine-tuning's own on its subclass."""

    rows: int  # sequences (fine-tuning: rows) a process reads per micro-step
    accum: int  # micro-steps per optimizer step
    total: int  # optimizer steps of the run (fine-tuning: 0, its epochs')
    eval_period: int  # optimizer steps between evaluations inside the run (0: fine-tuning's epochs' ends only)

    def evaluates_at(self, step: int) -> bool:
        """Whether the run evaluates after ``step`` for its cadence (the run's end, an epoch's, aside)."""
        return self.eval_period > 0 and step % self.eval_period == 0

    def per_epoch(self, batches: int) -> int:
        """Optimizer steps in an epoch of ``batches`` micro-steps (its last step takes what is left)."""
        return math.ceil(batches / self.accum)

    def epoch_refusal(self, batches: int, unit: str, epoch: str, more: str = "") -> str | None:
        """Why one optimizer step cannot fit an epoch of ``batches`` micro-steps, each ``unit`` (what the command
        calls one: ``global batches of 64``); ``epoch``: the data and its size as the command names them;
        ``more``: another way out. A step would be the epoch, said as more. None: it fits."""
        if self.accum <= batches:
            return None
        return (
            f"--grad-accum {self.accum}: one optimizer step would take {self.accum} {unit}, more than the "
            f"{batches} of one epoch of {epoch}; lower --grad-accum or --batch-size{more}"
        )

    def per_process(self, world_size: int) -> str:
        """The batch of one micro-step as a message names it: ``--batch-size 8 on 2 process(es)``."""
        return f"--batch-size {self.rows} on {world_size} process(es)"

    def resume_refusal(self, saved: dict[str, Any], saved_world: int, world_size: int, checkpoint: Any) -> str | None:
        """Why these steps cannot continue the run of ``checkpoint``, whose settings (leaf name -> value) are
        ``saved``, on ``saved_world`` processes: fewer steps than it took is :meth:`below`; its global batch per
        micro-step (processes x --batch-size) must stay, the data order follows it (elastic resume keeps it with
        another number of processes). None: it can."""
        old_rows = saved.get("batch_size", self.rows)
        for name, value in (("batch_size", old_rows), ("grad_accum", saved.get("grad_accum", 1))):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # "8" * 1 was "8", not 8
                return f"{checkpoint}/config.json: train {name} {value!r} is not a count (an integer >= 1)"
        if saved_world * old_rows == world_size * self.rows:
            return None
        old_accum = saved.get("grad_accum", self.accum)
        if old_accum == 1 and self.accum == 1:
            return (
                f"resuming {checkpoint} needs its global batch (processes x --batch-size): the run has "
                f"{_batch(saved_world, old_rows)}, this resume {_batch(world_size, self.rows)}"
            )
        # One optimizer step reads W x B x --grad-accum sequences, but the data order follows W x B (the batch
        # of one micro-step): another split of the same step is another run, not this one continued.
        return (
            f"resuming {checkpoint} needs its micro-step batch (processes x --batch-size; the data order follows "
            f"it): the run has {_batch(saved_world, old_rows)} (x --grad-accum {old_accum} = "
            f"{saved_world * old_rows * old_accum} a step), this resume {_batch(world_size, self.rows)} (x "
            f"--grad-accum {self.accum} = {world_size * self.rows * self.accum} a step)"
        )

    def below(self, step: int, checkpoint: Any) -> str | None:
        """Why a resume at ``step`` of ``checkpoint`` cannot end at this run's last step (None: it can)."""
        if self.total >= step:
            return None
        return f"--max-steps {self.total} is below step {step} of {checkpoint}: pass a larger --max-steps"

    def replanned(self, shape: str, old_end: int, step: int, rates: str) -> str:
        """The line a resume logs when its decay of ``shape`` now ends at this run's last step, not ``old_end``."""
        return (
            f"--max-steps {self.total}: the {shape} decay now ends at step {self.total} "
            f"(was {old_end}); learning rates at step {step}, {rates}"
        )


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    # The data section is the loader's own config; what the run decides for the whole run (the batch size,
    # the seed) it takes from the leaves of that name. Its masking flags are listed with the objective's.
    data: DataConfig = section(
        DataConfig,
        linked=("batch_size", "seed"),
        after={"masking": "dist_timeout", "num_workers": "format"},
        num_workers=2,
    )
    eval_set: EvalSet = section(EvalSet, after={"eval_data": "paths"})
    model: ModelChoice = section(ModelChoice)
    # --output, --resume, --overwrite: the run folder's section (both commands'), its flags listed where they were
    run_folder: RunFolder = section(RunFolder, after={"resume": "keep_checkpoints", "overwrite": "reset_optimizer"})
    run: RunConfig = section(RunConfig, after={"dist_timeout": "unpad", "device": "report_to"})
    batch: DeviceBatch = section(DeviceBatch)
    grad_accum: int = opt(1, tags=(FIXED,))
    max_steps: int = opt(10_000, "Also the end of the linear decay.")
    max_minutes: float = opt(0.0, "Stop early (evaluate, checkpoint) after this wall time.")
    optim: PretrainOptim = section(PretrainOptim)
    compile: bool | None = opt(
        None,
        "torch.compile the model: on by default on CUDA; off by default on CPU, where it measured slower over a few "
        "hundred steps (compiling costs more than it saves; docs/pretraining.md).",
        flag="--compile/--no-compile",
    )
    compile_mode: str = opt(
        "default",
        "torch.compile mode: default; reduce-overhead (CUDA graphs: fewer launches); max-autotune (longer start-up).",
        choices=COMPILE_MODES,
    )
    eval_every: int = opt(500, tags=(EVALUATION,))
    eval_batches: int = opt(0, PER_EVALUATION_HELP, tags=(EVALUATION,))
    checkpoint: CheckpointConfig = section(CheckpointConfig)
    deterministic: bool = opt(False, "torch.use_deterministic_algorithms(True).")
    unpad: bool = opt(
        True,
        "Run the encoder on real tokens only (attention within each sequence); --no-unpad: the padded [B, T] batch.",
        flag="--unpad/--no-unpad",
    )
    objective: ObjectiveConfig = section(ObjectiveConfig)
    given: frozenset[str] | None = options.given_field()  # the flags the command line gave (a resume takes the rest)

    def __post_init__(self) -> None:
        options.check_linked(self)
        self.run_folder.refuse_remote(
            "checkpoints are written to a temporary folder and renamed, which object stores cannot do",
            (self.data.flag,),
        )
        new_phase = self.checkpoint.reset_optimizer
        check(not (new_phase and self.run_folder.checkpoint_path is None), "reset_optimizer", NEW_PHASE_NEEDS)
        check_ints(self, ("grad_accum", "max_steps", "eval_every"), 1)
        check_finite(self)
        check(self.max_minutes >= 0, "max_minutes", f"must be >= 0, got {self.max_minutes}")
        check_ints(self, ("eval_batches",), 0)

    @classmethod
    def build(cls, **values: Any) -> TrainConfig:
        """From flat settings named as the flags are (``TrainConfig.build(paths=("ds",), output="run")``)."""
        return options.build(cls, **values)

    @property
    def steps(self) -> Steps:
        """``--batch-size``, ``--grad-accum``, ``--max-steps`` and ``--eval-every`` as what the run asks of them."""
        return Steps(self.batch.batch_size, self.grad_accum, self.max_steps, self.eval_every)

    @property
    def schedule(self) -> Schedule:
        """The run's learning-rate schedule: ``--warmup-steps``, then the decay to ``--max-steps``."""
        return Schedule.pretraining(self.optim, self.max_steps)

    def warmup_note(self) -> str | None:
        """:func:`warmup_note` for this run's schedule: one line when its warm-up does not end before the run does."""
        return warmup_note(self.schedule.warmup, self.schedule.total)

    def compiles(self, device_type: str) -> bool:
        """``--compile/--no-compile``, or when neither is given the device's default: on CUDA only (see the flag).
        The run, its step and its evaluation ask this; none reads the field."""
        return device_type == "cuda" if self.compile is None else self.compile

    def to_dict(self) -> dict[str, Any]:
        return options.to_dict(self)
