"""Configuration of ``bertprep pretraining``: everything that shapes the instances, validated on construction
(with :func:`bertstream.cli.errors.check`, like every component config of the project)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bertstream.cli import options
from bertstream.cli.errors import UsageError, check
from bertstream.cli.options import RECORDED, RECORDED_WHEN_SET, opt, section, with_tags
from bertstream.pipelines.common.formats import ARROW_COMPRESSIONS, OUTPUT_FORMATS
from bertstream.pipelines.inputs.options import (
    check_input_fields,
    input_format_opt,
    inputs_opt,
    text_field_opt,
)
from bertstream.schemas.masking import MaskingSettings, SettingError

DEDUP_MODES = ("none", "exact", "minhash")  # see pipelines.pretraining.dedup
MAX_DEDUP_NGRAM = 64


DEFAULT_DEDUP_NGRAM = 5
DEFAULT_DEDUP_THRESHOLD = 0.8
MINHASH_ONLY = ("dedup", "minhash")  # the MinHash settings apply (and are recorded) with --dedup minhash only


@dataclass(frozen=True, kw_only=True, slots=True)
class PretrainingConfig:
    """Everything that shapes the instances. Two runs with equal configs and inputs write equal shards."""

    # The parameters that shape the rows are recorded in every shard (RECORDED; RECORDED_WHEN_SET: only when not
    # the default, so that shards written before the setting keep their bytes): see shard_parameters.
    input_format: str = with_tags(input_format_opt("wikiextractor"), RECORDED)
    text_field: str = with_tags(text_field_opt(), RECORDED_WHEN_SET)
    max_seq_length: int = opt(128, show=True, tags=(RECORDED,))
    # The masking settings: ``masking`` builds the rule's one object (bertstream.schemas.masking) from them.
    max_predictions_per_seq: int = opt(20, show=True, tags=(RECORDED,))
    masked_lm_prob: float = opt(0.15, show=True, tags=(RECORDED,))
    short_seq_prob: float = opt(0.1, show=True, tags=(RECORDED,))
    dupe_factor: int = opt(10, show=True, tags=(RECORDED,))
    seed: int = opt(12345, show=True, tags=(RECORDED,))
    whole_word_mask: bool = opt(False, tags=(RECORDED,))
    # "" (words are ## pieces), or "rjieba"/"jieba": words of Chinese text
    word_segmenter: str = opt(
        "",
        "With --whole-word-mask: words from this Chinese segmenter (pip install 'bertstream[chinese]').",
        choices=("rjieba", "jieba"),
        tags=(RECORDED_WHEN_SET,),
    )
    lowercase: bool = opt(True, cli=False, tags=(RECORDED,))  # the tokenizer's (PretrainingJob.casing: the flag)
    output_format: str = opt("arrow", choices=OUTPUT_FORMATS, show=True)
    # 0: chosen from the input size (see bertstream.pipelines.pretraining.pipeline.SHARD_SIZING)
    num_shards: int = opt(0, "Shards per format (default: from the input size).")
    docs_per_group: int = opt(2000, "Documents per random-next pool.", show=True, tags=(RECORDED,))
    max_group_tokens: int = opt(64_000_000, cli=False, tags=(RECORDED,))
    tokens_per_unit: int = opt(250_000, cli=False)
    arrow_compression: str = opt("zstd", choices=ARROW_COMPRESSIONS, show=True)
    arrow_batch_rows: int = opt(2048, cli=False)
    strip_gutenberg: bool = opt(
        True, "Keep Project Gutenberg headers and licences.", flag="--keep-gutenberg", negate=True, tags=(RECORDED,)
    )
    dedup: str = opt(
        "none",
        "Drop duplicate documents: exact (normalised text) or minhash (also near duplicates).",
        choices=DEDUP_MODES,
        show=True,
        tags=(RECORDED_WHEN_SET,),
    )
    dedup_ngram: int = opt(
        DEFAULT_DEDUP_NGRAM, "Words per MinHash shingle.", show=True, tags=(RECORDED,), only_with=MINHASH_ONLY
    )
    dedup_threshold: float = opt(
        DEFAULT_DEDUP_THRESHOLD, "MinHash Jaccard threshold.", show=True, tags=(RECORDED,), only_with=MINHASH_ONLY
    )
    # 0: no evaluation dataset; see bertstream.pipelines.pretraining.holdout
    eval_fraction: float = opt(
        0.0,
        "Hold out this share of the documents (chosen by id and --seed) as an evaluation dataset in OUTPUT/eval.",
        tags=(RECORDED_WHEN_SET,),
    )

    def __post_init__(self) -> None:
        check_input_fields(self.input_format, self.text_field)
        check(8 <= self.max_seq_length <= 65535, "max_seq_length", f"must be in [8, 65535], got {self.max_seq_length}")
        check(
            1 <= self.max_predictions_per_seq <= self.max_seq_length - 3,
            "max_predictions_per_seq",
            f"must be in [1, max_seq_length - 3 = {self.max_seq_length - 3}], got {self.max_predictions_per_seq}",
        )
        check(0.0 < self.masked_lm_prob < 1.0, "masked_lm_prob", f"must be in (0, 1), got {self.masked_lm_prob}")
        check(0.0 <= self.short_seq_prob <= 1.0, "short_seq_prob", f"must be in [0, 1], got {self.short_seq_prob}")
        check(1 <= self.dupe_factor <= 1000, "dupe_factor", f"must be in [1, 1000], got {self.dupe_factor}")
        check(0 <= self.seed < 2**63, "seed", f"must be in [0, 2**63), got {self.seed}")
        check(
            self.word_segmenter in ("", "rjieba", "jieba"),
            "word_segmenter",
            f"must be rjieba or jieba, got {self.word_segmenter!r}",
        )
        check(
            not self.word_segmenter or self.whole_word_mask,
            "word_segmenter",
            "only applies with --whole-word-mask",
        )
        check(
            self.output_format in OUTPUT_FORMATS,
            "output_format",
            f"must be one of {OUTPUT_FORMATS}, got {self.output_format!r}",
        )
        check(
            0 <= self.num_shards <= 100_000, "num_shards", f"must be in [1, 100000] (0 = auto), got {self.num_shards}"
        )
        check(self.docs_per_group >= 2, "docs_per_group", f"must be >= 2, got {self.docs_per_group}")
        check(self.max_group_tokens >= 10_000, "max_group_tokens", f"must be >= 10000, got {self.max_group_tokens}")
        check(self.tokens_per_unit >= 1_000, "tokens_per_unit", f"must be >= 1000, got {self.tokens_per_unit}")
        check(
            self.arrow_compression in ARROW_COMPRESSIONS,
            "arrow_compression",
            f"must be one of {ARROW_COMPRESSIONS}, got {self.arrow_compression!r}",
        )
        check(self.dedup in DEDUP_MODES, "dedup", f"must be one of {DEDUP_MODES}, got {self.dedup!r}")
        check(
            1 <= self.dedup_ngram <= MAX_DEDUP_NGRAM,
            "dedup_ngram",
            f"must be in [1, {MAX_DEDUP_NGRAM}], got {self.dedup_ngram}",
        )
        check(0.0 < self.dedup_threshold <= 1.0, "dedup_threshold", f"must be in (0, 1], got {self.dedup_threshold}")
        options.check_only_with(self)  # dedup_ngram and dedup_threshold: with --dedup minhash only
        try:
            _ = self.masking  # the rule's own checks (the split adds up to 1, ...)
        except SettingError as e:
            raise UsageError(e.name, e.message) from None
        check(
            self.eval_fraction == 0.0 or 0.0 < self.eval_fraction < 1.0,
            "eval_fraction",
            f"must be in (0, 1) (a share of the documents), got {self.eval_fraction}",
        )
        check(self.arrow_batch_rows >= 1, "arrow_batch_rows", f"must be >= 1, got {self.arrow_batch_rows}")

    @property
    def max_num_tokens(self) -> int:
        """Tokens of A and B together: the sequence less [CLS] and two [SEP]."""
        return self.max_seq_length - 3

    @property
    def formats(self) -> tuple[str, ...]:
        return ("arrow", "webdataset") if self.output_format == "both" else (self.output_format,)

    @property
    def masking(self) -> MaskingSettings:
        """The masking settings as the rule takes them (the Mask stage's one object)."""
        return MaskingSettings(self.masked_lm_prob, self.max_predictions_per_seq, self.whole_word_mask)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def shard_parameters(self, split: str = "train") -> dict[str, Any]:
        """Parameters that shape the rows, stored in every shard's schema metadata: the settings tagged
        recorded (``cli.options.recorded``); with ``--eval-fraction``, also which dataset (``split``: train or
        eval) the shard is of. Knobs that only change how work is split or stored are not tagged, so that shards
        stay comparable."""
        out = options.recorded(self)
        if self.eval_fraction:  # only then: shards written without it stay byte-identical
            out["split"] = split
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class PretrainingJob:
    """One ``bertprep pretraining`` run: what to read and write, and the :class:`PretrainingConfig`."""

    inputs: tuple[str, ...] = inputs_opt()
    vocab: str = opt(help="vocab.txt or tokenizer.json (local or URL).", after="input_format")
    output: str = opt(help="Output folder (local or URL).", after="vocab")
    config: PretrainingConfig = section(PretrainingConfig, input_format="auto")
    casing: bool | None = opt(
        None,
        "Casing (default: from tokenizer.json; lowercase for vocab.txt).",
        flag="--lowercase/--cased",
        after="word_segmenter",
    )
    overwrite: bool = opt(False, "Replace a dataset already in --output.")
    verbose: bool = opt(False, "Also print a line per input file, group and shard.")
    beam_args: tuple[str, ...] = opt((), cli=False)  # any other --option: Beam pipeline options
