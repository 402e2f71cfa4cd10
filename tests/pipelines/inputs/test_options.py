"""The flags every job that reads text declares through ``pipelines/inputs/options.py``."""

from __future__ import annotations

from bertstream.pipelines.common.files import COMPRESSED_SUFFIXES
from bertstream.pipelines.inputs.options import inputs_opt


def test_the_input_help_names_every_compression_the_reader_decompresses():
    """xz was read (``.xz``, ``.lzma``) but --input's help named gz/bz2/zst only."""
    help_text = inputs_opt().metadata["help"]
    families = {"gzip": "gz", "lzma": "xz", "zstd": "zst"}
    named = {families.get(s.lstrip("."), s.lstrip(".")) for s in COMPRESSED_SUFFIXES}
    assert named == {"gz", "bz2", "xz", "zst"}
    listed = help_text.split("; ", 1)[1].split(" by extension")[0].split("/")
    assert sorted(listed) == sorted(named), help_text
