"""Configuration of ``bertprep vocab`` (:mod:`bertstream.pipelines.vocab` trains): light to import, since the command
line builds its flags from these fields before any of the training code loads."""

from __future__ import annotations

from dataclasses import dataclass

from bertstream.cli.errors import check
from bertstream.cli.options import opt, section
from bertstream.pipelines.inputs.options import check_input_fields, input_format_opt, inputs_opt, text_field_opt
from bertstream.schemas.vocab import SPECIAL_TOKENS


@dataclass(frozen=True, kw_only=True, slots=True)
class VocabConfig:
    input_format: str = input_format_opt("sentences")
    text_field: str = text_field_opt()
    vocab_size: int = opt(30522, show=True)
    lowercase: bool = opt(True, flag="--lowercase/--cased", show=True)
    # 0: the whole corpus
    sample_bytes: int = opt(0, "Train on a deterministic sample of about this many bytes.")
    min_frequency: int = opt(2, show=True)
    limit_alphabet: int = opt(1000, cli=False)
    seed: int = opt(12345, show=True)

    def __post_init__(self) -> None:
        check_input_fields(self.input_format, self.text_field)
        lo = len(SPECIAL_TOKENS) + 10
        check(lo <= self.vocab_size <= 1_000_000, "vocab_size", f"must be in [{lo}, 1000000], got {self.vocab_size}")
        check(self.sample_bytes >= 0, "sample_bytes", f"must be >= 0, got {self.sample_bytes}")
        check(self.min_frequency >= 1, "min_frequency", f"must be >= 1, got {self.min_frequency}")


@dataclass(frozen=True, kw_only=True, slots=True)
class VocabJob:
    """One ``bertprep vocab`` run: the ``--input`` patterns, the output folder and the :class:`VocabConfig`."""

    inputs: tuple[str, ...] = inputs_opt(compressed=False)
    output: str = opt(help="Folder for vocab.txt and tokenizer.json.", path="dir", exists=False, after="input_format")
    config: VocabConfig = section(VocabConfig, input_format="auto")
    overwrite: bool = opt(False, "Replace a vocabulary already in --output.")
