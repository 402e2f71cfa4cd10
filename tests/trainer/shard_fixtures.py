"""Test-only helpers around the synthetic datasets of ``benchmarks.lib.synthetic_shards``."""

from __future__ import annotations

from pathlib import Path


def copy_to_fsspec(local_dir: str | Path, url: str) -> None:
    """Upload a dataset directory (e.g. into ``memory://name``) for remote-reading tests."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    for f in sorted(Path(local_dir).iterdir()):
        fs.pipe_file(f"{path}/{f.name}", f.read_bytes())
