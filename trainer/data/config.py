"""``DataConfig``: everything that shapes the pretraining batch stream, validated up front; it is also the data
section of ``berttrain pretrain`` (its fields carry their flags)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from os import PathLike
from typing import Any

from bertstream.cli import options
from bertstream.cli.errors import UsageError, check
from bertstream.cli.machine import check_processes
from bertstream.cli.options import DYNAMIC, FIXED, PER_NODE, opt
from bertstream.schemas.masking import MaskingSettings, SettingError
from bertstream.trainer.checks import check_ints
from bertstream.trainer.data.workers import quiet_worker_init
from bertstream.trainer.seeds import Seeds

FORMATS = ("auto", "arrow", "webdataset")
VERIFY_MODES = ("sha256", "size")
MASKING_MODES = ("static", "dynamic")


def check_masking(cfg: DataConfig) -> None:
    """Validate the masking options of ``cfg``: ``masking`` and the settings tagged ``DYNAMIC``, which static
    masking leaves at their defaults. Raises ``UsageError`` naming the field (the CLI names its flag)."""
    check(cfg.masking in MASKING_MODES, "masking", f"must be one of {MASKING_MODES}, got {cfg.masking!r}")
    p = cfg.mlm_probability
    ok = isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p < 1
    check(ok, "mlm_probability", f"must be in (0, 1), got {p}")
    k = cfg.max_predictions
    ok = k is None or (isinstance(k, int) and not isinstance(k, bool) and k >= 1)
    check(ok, "max_predictions", f"must be >= 1, got {k}")
    for name, default in DYNAMIC_ONLY.items():
        check(
            cfg.masking == "dynamic" or getattr(cfg, name) == default,
            name,
            "needs --masking dynamic (static masks are read from the shards as written)",
        )
    try:
        _ = cfg.masking_settings  # the rule's own checks (the split adds up to 1, ...)
    except SettingError as e:
        raise UsageError(e.name, e.message) from None


_DYN = (FIXED, DYNAMIC)  # a dynamic-masking setting, which a resume keeps


@dataclass(frozen=True, slots=True, kw_only=True)
class Workers:
    """The data loader's worker processes of a rank (``--num-workers``), declared once for both commands that
    read their data in them: pretraining's ``DataConfig`` is one, fine-tuning holds one as its ``workers`` section.
    Checked here, and turned here into what torch's ``DataLoader`` takes (:meth:`loader_settings`) and
    pretraining's lanes (:attr:`lanes`); a worker's death is worded with the errors that end a run
    (``trainer.errors``, below the data side)."""

    num_workers: int = opt(0, "Data-loader worker processes per rank.", tags=(PER_NODE,))

    def __post_init__(self) -> None:
        check_ints(self, ("num_workers",), 0)
        check_processes("num_workers", self.num_workers, per_rank=True)

    @property
    def lanes(self) -> int:
        """How many lanes a pretraining epoch's batches are cut into for the workers to read (the main process
        reads one)."""
        return max(1, self.num_workers)

    def loader_settings(self, prefetch_factor: int = 2) -> dict[str, Any]:
        """The keyword arguments of torch's ``DataLoader`` that say who reads: the workers (each quiet:
        :func:`~bertstream.trainer.data.workers.quiet_worker_init`) and how many batches each reads ahead, or
        the main process."""
        return {
            "num_workers": self.num_workers,
            "prefetch_factor": prefetch_factor if self.num_workers else None,
            "worker_init_fn": quiet_worker_init,
        }


IN_MAIN = Workers()  # the main process reads (an evaluation set, read in order)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalSet:
    """The evaluation dataset folder, ``--eval-data``, declared once for both training commands, each with its
    help, default and tags (``section(EvalSet, ...)``): pretraining's may be left out (the run evaluates nothing),
    fine-tuning's is required and kept on resume. What the runs read of it and say about it is made here: its
    folders, the flag and folder an error or a check names, an evaluation set that is a training set, one that
    does not match the training set or cannot be read."""

    eval_data: str | None = opt(None, "Evaluation dataset folder.")

    def __post_init__(self) -> None:
        check(self.eval_data != "", "eval_data", "names no folder ('')")  # it was read as no --eval-data at all

    def require(self) -> None:
        """Refuse no folder: a command that always evaluates (fine-tuning) asks this."""
        check(bool(self.eval_data), "eval_data", "is required")

    @property
    def folders(self) -> tuple[str, ...]:
        """The evaluation folder, or none: nothing is evaluated."""
        return () if self.eval_data is None else (self.eval_data,)

    @property
    def flag(self) -> str:
        """The set's flag (``--eval-data``, read from its declaration), as a message about the command's inputs
        names it."""
        return options.flag_for(EvalSet, "eval_data")

    def named(self) -> tuple[str, tuple[str, ...]]:
        """``(flag, folders)``: the folders as a check names them (the data's length against the model's)."""
        return self.flag, self.folders

    def input_path(self) -> tuple[str, str | None]:
        """``(flag, folder or None)``: what an ``--overwrite`` of the run folder must not delete."""
        return self.flag, self.eval_data

    def also_training(self, training: Sequence[str], flag: str, meaning: str) -> str | None:
        """The warning when the evaluation set is one of the ``training`` folders (given as ``flag``): what its
        figures then mean. None: it is not."""
        if not self.eval_data or dataset_key(self.eval_data) not in {dataset_key(p) for p in training}:
            return None
        return f"warning: --eval-data {self.eval_data} is also {flag}: {meaning}"

    def unreadable(self, why: object) -> str:
        """The error of an evaluation set that cannot be read as asked (too few samples for one batch, ...)."""
        return f"--eval-data: {why}"

    def other_vocabulary(self, why: object) -> str:
        """The error of an evaluation set whose vocabulary is not the training data's (pretraining's --data)."""
        return f"--eval-data {self.eval_data} uses another vocabulary than --data ({why})"

    @staticmethod
    def settings_without_it(typed: str, values: Mapping[str, Any]) -> str | None:
        """The refusal of evaluation settings the command line typed (``typed``: their flags, joined) among flat
        ``values`` with no evaluation set, or None (none typed, or the set given): they would be dropped without
        a word and the run evaluate nothing."""
        if not typed or values.get("eval_data"):
            return None
        return f"{typed} without --eval-data: there is nothing to evaluate; give --eval-data DIR"


# What another flag's help says of the evaluation set (pretraining's --eval-batches), worded with the set's flag.
PER_EVALUATION_HELP = (
    "Batches of --eval-data per evaluation (each process's); 0: all of it (the remainder smaller than one batch "
    "of all processes is left out). The log line says how many instances were evaluated of how many."
)


def unlike_training(training: str, folder: str, what: str) -> str:
    """The error of an evaluation set ``folder`` that does not fit the training set (``training``: its flag and
    folder, as the training set's owner names them): ``what`` differs."""
    return f"{training} and --eval-data {folder} {what}"


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig(Workers):
    """Streaming pretraining data: the loader's config, and the data section of ``berttrain pretrain`` (its
    flags), whose ``batch_size``, ``seed`` and masking options are the run's (``section(..., linked=...)``).

    ``paths`` are dataset directories (local paths or fsspec URLs such as ``s3://b/ds``), each holding a
    ``manifest.json``; their shards are read as one dataset. ``batch_size`` is per rank.

    ``weights`` (one per path, > 0; relative, normalised here) mix the folders instead: each is its own
    dataset with its own shuffled passes, dealt into every global batch in proportion to its weight. An
    epoch is then the samples in which the heaviest-weighted folder is read once (its full size); every
    other folder gets ``round(size_heaviest * weight / weight_heaviest)`` samples per epoch, wrapping into
    a fresh pass when that is more than it holds and continuing next epoch where it stopped when less.
    Without ``weights``, paths spelled ``DIR:WEIGHT`` (as ``--data`` takes them) give them; a trailing ``/``
    keeps a numeric tail part of the folder's name.

    Shuffling is index-addressable so that a position is three integers: each epoch permutes the shard
    order, then permutes samples inside consecutive windows of ``shuffle_buffer`` samples of that stream
    (same memory and locality as a shuffle buffer of that size, but every position is computable).
    ``verify="sha256"`` hashes every shard when it is opened (with ``skip_corrupt`` all shards are hashed
    up front instead, so every rank excludes the same shards before the step count is fixed);
    ``"size"`` only compares file sizes with the manifest and relies on decode checks.

    ``masking="static"`` serves the shards' masks as written; ``"dynamic"`` rebuilds each original sequence
    and masks it afresh per (seed, epoch, instance id) with the settings tagged ``DYNAMIC`` (the rule's one
    object, :attr:`masking_settings`; see :mod:`bertstream.trainer.data.masking`). They are declared here, the
    loader's config, and are ``berttrain pretrain``'s flags (listed last in ``--help``, with the objective).
    """

    paths: tuple[str, ...] = opt(
        help="Dataset folder with a manifest.json (repeatable; local or URL). DIR:WEIGHT on every --data mixes "
        "the folders by weight instead of reading them as one dataset.",
        flag="--data",
    )
    batch_size: int = opt()
    format: str = opt(
        "auto",
        "Shard format to read --data in (auto: Arrow where a dataset has it); --eval-data without it is read in the "
        "format it has.",
        flag="--format",
        choices=FORMATS,
        tags=(FIXED,),
    )
    shuffle: bool = opt(True, cli=False)
    shuffle_buffer: int = opt(10_000, cli=False)
    seed: int = opt(0)
    prefetch_factor: int = opt(2, cli=False)
    pin_memory: bool = opt(False, cli=False)  # the trainer sets it for a CUDA device
    length_bucketing: bool = opt(False, cli=False)
    bucket_batches: int = opt(16, cli=False)
    drop_remainder: bool = opt(True, cli=False)
    skip_corrupt: bool = opt(False, "Skip (and count) shards whose checksum fails instead of stopping.")
    verify: str = opt("sha256", cli=False, choices=VERIFY_MODES)
    weights: tuple[float, ...] | None = opt(None, cli=False, flag="--data")  # from --data DIR:WEIGHT
    masking: str = opt(
        "static",
        "static: the shards' masks; dynamic: fresh masks per epoch from the same shards.",
        choices=MASKING_MODES,
        tags=(FIXED,),
    )  # dynamic: masks drawn per (seed, epoch, instance)
    # The flags bertprep names these with (cli.options.ALIASES keeps --mlm-probability and --max-predictions).
    mlm_probability: float = opt(
        0.15, "Dynamic masking: share of tokens predicted.", flag="--masked-lm-prob", after="masking", tags=_DYN
    )
    max_predictions: int | None = opt(
        None,
        "Dynamic masking: most predictions per sequence (default: no cap).",
        flag="--max-predictions-per-seq",
        after="mlm_probability",
        tags=_DYN,
    )
    whole_word_mask: bool = opt(
        False, "Dynamic masking: mask whole words (a token and its ## pieces).", after="max_predictions", tags=_DYN
    )

    def __post_init__(self) -> None:
        raw = self.paths
        given: Sequence[str | PathLike[str]] = (raw,) if isinstance(raw, (str, PathLike)) else raw
        paths = tuple(str(p) for p in given)
        check(len(paths) > 0, "paths", "at least one --data DIR is required")
        weights = self.weights
        if weights is None:
            try:
                paths, weights = split_data_args(paths)
            except ValueError as e:
                raise UsageError("paths", str(e)) from None
        blank = next((d for d in paths if not d), None)  # "" read /manifest.json: "no manifest" named it
        check(blank is None, "paths", f"--data {blank!r} names no folder")
        keys = [dataset_key(d) for d in paths]  # also `./out/good` and `out/good`: the same samples twice
        twice = sorted({d for d, k in zip(paths, keys) if keys.count(k) > 1})
        check(not twice, "paths", f"the same dataset is given more than once: {', '.join(twice)}")
        object.__setattr__(self, "paths", tuple(_strip_slash(p) for p in paths))
        _positive("batch_size", self.batch_size)
        check(self.format in FORMATS, "format", f"must be one of {FORMATS}, got {self.format!r}")
        for name in ("shuffle_buffer", "seed"):
            value = getattr(self, name)
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            check(ok, name, f"must be an int >= 0, got {value!r}")
            check(value < 1 << 63, name, f"must be at most 2**63 - 1, got {value!r}")
        Workers.__post_init__(self)  # (zero-argument super() fails in slotted dataclasses on 3.11)
        _positive("prefetch_factor", self.prefetch_factor)
        ok = isinstance(self.bucket_batches, int) and self.bucket_batches >= 2
        check(ok, "bucket_batches", f"must be an int >= 2, got {self.bucket_batches!r}")
        check(self.verify in VERIFY_MODES, "verify", f"must be one of {VERIFY_MODES}, got {self.verify!r}")
        if weights is not None:
            weights = tuple(weights)
            object.__setattr__(self, "weights", weights)
            check(len(weights) == len(paths), "weights", f"{len(weights)} weights for {len(paths)} paths")
            for p, w in zip(paths, weights):
                ok = not isinstance(w, bool) and isinstance(w, (int, float)) and math.isfinite(w) and w > 0
                check(ok, "weights", f"{p} has weight {w!r}; weights must be finite and > 0")
        check_masking(self)  # static masks are the shards' own: the dynamic-only options would do nothing

    @property
    def masking_settings(self) -> MaskingSettings:
        """The dynamic masks' settings as the rule takes them (``bertstream.schemas.masking``)."""
        return MaskingSettings(self.mlm_probability, self.max_predictions, self.whole_word_mask)

    def evaluation(self, folder: str, formats: Sequence[str]) -> tuple[DataConfig, str | None]:
        """How an evaluation set ``folder`` (whose manifest holds shards in ``formats``) is read beside this
        training data: in stream order, with the shards' own masks, in the main process, and a corrupt shard
        stops the run; in ``--format`` where it has that format, else in the format it has, which the note (None:
        nothing to say) tells the user. The batch size and seed are this data's."""
        fmt, note = self.format, None
        if fmt != "auto" and fmt not in formats:
            fmt, note = "auto", f"--eval-data {folder} has no {fmt} shards: read as {', '.join(formats)}"
        one: dict[str, Any] = {"paths": (folder,), "weights": None, "format": fmt}
        in_order = {"shuffle": False, "num_workers": 0, "skip_corrupt": False, "masking": "static", **DYNAMIC_ONLY}
        return replace(self, **one, **in_order), note

    @classmethod
    def whole(cls, folder: str, batch_size: int) -> DataConfig:
        """``folder`` read once in stream order, every sample (the last batch filled up with a few served twice,
        ``PretrainingLoader.repeated_per_epoch``): a tool's one pass over a dataset (``berttrain plot``'s baseline)."""
        return cls(paths=(folder,), batch_size=batch_size, shuffle=False, drop_remainder=False)

    @property
    def seeds(self) -> Seeds:
        """The loader's random streams (data order, masks, workers), derived from the run's ``--seed``."""
        return Seeds(self.seed)

    @property
    def window(self) -> int:
        """Shuffle window in samples; 1 means stream order."""
        return max(1, self.shuffle_buffer) if self.shuffle else 1

    # The training folders as the runs name them, as EvalSet's are: a message about them elsewhere says their
    # flag through these, so the folders and their flag are this section's alone.
    @property
    def flag(self) -> str:
        """The folders' flag (``--data``), as a message about the command's inputs names it."""
        return options.flag_for(DataConfig, "paths")

    def named(self) -> tuple[str, tuple[str, ...]]:
        """``(flag, folders)``: the training folders as a check names them (the run folder must not hold one; the
        data's length against the model's; an evaluation set that is one of them)."""
        return self.flag, self.paths

    def notes(self) -> list[str]:
        """:func:`weight_notes` of these folders: a ``DIR:N`` read as a weight beside a folder of that name."""
        return weight_notes(self.paths, self.weights)

    def unreadable(self, why: object) -> str:
        """The error of training folders that cannot be read as asked (too few samples for one global batch, a
        weight too small for one sample per epoch, vocabulary files that do not match the manifest)."""
        return f"{self.flag}: {why}"


# The dynamic-only masking options and their defaults (what static masking must leave them at).
DYNAMIC_ONLY: dict[str, Any] = options.defaults(DataConfig, DYNAMIC)

# A trailing ":<number>" is a weight; everything before it is the folder (paths may hold ':' themselves:
# s3://bucket/x, C:\\data). A non-numeric tail ("C:", "x:y") stays part of the path.
_WEIGHTED = re.compile(r"(?P<path>.+):(?P<weight>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def parse_data_arg(text: str) -> tuple[str, float | None]:
    """``--data DIR[:WEIGHT]`` -> ``(DIR, WEIGHT or None)``; a weight must be > 0."""
    m = _WEIGHTED.fullmatch(text)
    if m is None:
        return text, None
    weight = float(m["weight"])
    if not (math.isfinite(weight) and weight > 0):  # (1e400 reads as inf)
        raise ValueError(f"{text}: the weight after the last ':' must be a finite number > 0, got {m['weight']}")
    return m["path"], weight


def weight_notes(paths: Sequence[str], weights: Sequence[float] | None) -> list[str]:
    """One line per ``--data DIR:N`` read as a weight while a folder named ``DIR:N`` exists beside ``DIR``: the
    reading is said, with the spelling for the folder (a trailing ``/`` ends the path, so no weight is read)."""
    import os
    from pathlib import Path

    notes = []
    for path, weight in zip(paths, weights or ()):
        parent, name = os.path.split(path)
        if "://" in path or not Path(parent or ".").is_dir():
            continue
        for entry in sorted(Path(parent or ".").iterdir()):
            spelled = os.path.join(parent, entry.name)
            if entry.name.startswith(f"{name}:") and _parsed(spelled) == (path, weight):
                notes.append(
                    f"--data {spelled} read as folder {path!r} with weight {weight:g}; write {spelled}/ for a "
                    "folder of that name"
                )
    return notes


def _parsed(text: str) -> tuple[str, float | None] | None:
    try:
        return parse_data_arg(text)
    except ValueError:  # a folder named DIR:0 is no --data weight
        return None


def split_data_args(args: Sequence[str]) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
    """``--data`` values -> (folders, weights or None). Weights go on every folder or on none."""
    parsed = [parse_data_arg(a) for a in args]
    weights = [w for _, w in parsed]
    if all(w is None for w in weights):
        return tuple(p for p, _ in parsed), None
    bare = [a for a, w in zip(args, weights) if w is None]
    if bare:
        raise ValueError(f"give every --data a weight (DIR:WEIGHT) or none; {', '.join(bare)} has none")
    return tuple(p for p, _ in parsed), tuple(float(w) for w in weights if w is not None)


def _positive(name: str, value: object) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    check(ok, name, f"must be an integer >= 1, got {value!r}")  # (the words of the run's own checks)


def dataset_key(path: str) -> str:
    """A dataset folder's identity: a local path resolved (so spellings of one folder agree), a URL as given."""
    from pathlib import Path

    return path.rstrip("/") if "://" in path else str(Path(path).resolve())


def _strip_slash(path: str) -> str:
    stripped = path.rstrip("/")
    return path if not stripped or stripped.endswith(":") else stripped  # keep "/" and "memory://"
