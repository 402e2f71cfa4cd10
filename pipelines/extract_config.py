"""Configuration of ``bertprep extract`` (:mod:`bertstream.pipelines.extract` runs it): light to import, since the
command line builds its flags from these fields before any Beam code loads."""

from __future__ import annotations

from dataclasses import dataclass

from bertstream.cli.options import opt, section
from bertstream.pipelines.inputs.options import check_input_fields, input_format_opt, inputs_opt, text_field_opt


@dataclass(frozen=True, kw_only=True, slots=True)
class ExtractConfig:
    """What shapes the written documents: how the input is read (the read stage's settings) and whether the
    ``documents-*`` files (one for each range the read stage reads) are gzipped."""

    input_format: str = input_format_opt("auto")
    text_field: str = text_field_opt()
    strip_gutenberg: bool = opt(
        True, "Keep Project Gutenberg headers and licences.", flag="--keep-gutenberg", negate=True
    )
    gzip: bool = opt(
        True, "Write documents-*.jsonl.gz (gzip) or documents-*.jsonl.", flag="--gzip/--no-gzip", show=True
    )

    def __post_init__(self) -> None:
        check_input_fields(self.input_format, self.text_field)


@dataclass(frozen=True, kw_only=True, slots=True)
class ExtractJob:
    """One ``bertprep extract`` run: the ``--input`` patterns, the output folder and the :class:`ExtractConfig`."""

    inputs: tuple[str, ...] = inputs_opt()
    output: str = opt(help="Output folder (local or URL).", after="input_format")
    config: ExtractConfig = section(ExtractConfig)
    overwrite: bool = opt(False, "Replace documents already in --output.")
    beam_args: tuple[str, ...] = opt((), cli=False)  # any other --option: Beam pipeline options
