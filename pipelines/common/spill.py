"""Shuffles that carry references, not data: the spill files behind both of the pipeline's shuffles.

Beam's in-process and multi-processing runners hold a whole ``GroupByKey`` (and any PCollection that feeds
a side input) in the runner's memory, so a shuffle of the corpus's tokens or instances makes memory grow
with the corpus. Instead, a stage buffers its elements up to ``SPILL_BYTES``, writes them to one spill file
under the run's work directory, and sends on only small references (file name, byte ranges); the consumer
reads its byte ranges back. Beam's own file sinks work the same way: temporary files, then a finalize step.

A spill file's name is a hash of the identities of what it holds (document keys, instance ids), so a retried
bundle rewrites an identical file under the same name, and files of a failed attempt are never referenced:
only the references of the successful attempt reach the consumer. The work directory is deleted at the end
of the run, successful or not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from bertstream.pipelines.common import literal

# Bytes a spilling DoFn buffers before it writes a file. A worker holds about three times this at a flush
# (the buffer, its sorted copy, the encoded file); fewer, larger files mean fewer references to shuffle.
SPILL_BYTES = 16 << 20

# A shuffle aims at no more than this many spill files: references grow with files x blocks.
MAX_SPILL_FILES = 2000
MAX_SPILL_BYTES = 128 << 20


def spill_bytes_for(expected_bytes: int) -> int:
    """The buffer for a shuffle of about ``expected_bytes``: ``SPILL_BYTES``, or more (up to 128 MB) when
    that would make more than ``MAX_SPILL_FILES`` files (the instance shuffle of a 20 GB corpus at dupe 10
    moves ~150 GB: 64 MB buffers, ~2,300 files, instead of ~9,000)."""
    return int(min(MAX_SPILL_BYTES, max(SPILL_BYTES, expected_bytes // MAX_SPILL_FILES)))


# (offset, length) in a spill file.
ByteRange = tuple[int, int]

# A spill file sends one reference per block of consecutive keys (groups, shards), never more than this
# many per file: a 20 GB corpus has thousands of groups and shards and hundreds of spill files, whose
# per-key references would take gigabytes of the runner's memory (it holds a GroupByKey whole).
MAX_BLOCKS = 256


def keys_per_block(keys: int) -> int:
    """Keys (groups, shards) one reference covers: 1 up to ``MAX_BLOCKS`` keys, then enough for that many blocks."""
    return max(1, -(-keys // MAX_BLOCKS))


def key_blocks(keys: int) -> list[range]:
    """The keys of each block, in order: ``key_blocks(keys)[b]`` are the keys that block ``b``'s references cover."""
    k = keys_per_block(keys)
    return [range(a, min(keys, a + k)) for a in range(0, keys, k)]


def spill_path(work_dir: str, kind: str, identity: Iterable[bytes | memoryview]) -> str:
    """``WORK/kind-<hash>.bin``: the same identities give the same name on any worker and any retry."""
    h = hashlib.blake2b(kind.encode(), digest_size=12)
    for part in identity:
        h.update(part)
    return FileSystems.join(work_dir, f"{kind}-{h.hexdigest()}.bin")


def write_file(path: str, chunks: Iterable[bytes | memoryview]) -> None:
    """Write chunks back to back. A retry rewrites the same bytes; nothing reads the file before the
    references to it are emitted, which happens only after this returns."""
    with FileSystems.create(path, compression_type="uncompressed") as f:
        for c in chunks:
            f.write(c)


def read_ranges(path: str, ranges: Sequence[ByteRange]) -> list[bytes]:
    """The bytes at each (offset, length) of a file on any Beam filesystem (one open, a seek per range)."""
    out = []
    with FileSystems.open(path, compression_type="uncompressed") as f:
        for offset, length in ranges:
            f.seek(offset)
            data = f.read(length)
            if len(data) != length:
                raise OSError(
                    f"{path}: expected {length} bytes at offset {offset}, got {len(data)} (truncated spill file)"
                )
            out.append(data)
    return out


def remove_work_dir(work_dir: str) -> None:
    """Delete the work directory and everything in it. On object stores a "directory" is a prefix, which
    ``FileSystems.delete``/``exists`` do not match without listing it, so its objects are listed first (the
    folder's name taken literally: :mod:`bertstream.pipelines.common.literal`)."""
    if "://" not in work_dir:
        literal.delete([work_dir])
        return
    objects = literal.files_below(work_dir)
    if objects:
        literal.delete(objects)


class SpillFn(beam.DoFn):
    """Buffers elements for a bundle and spills them whenever ``SPILL_BYTES`` is reached and at its end.

    Subclasses define ``size(element)`` and ``spill(elements)``, which writes one file and yields the
    references to send on. Memory stays bounded by the buffer whatever the bundle size (on the in-process
    runner a bundle can be a whole stage's input).
    """

    def __init__(self, work_dir: str, spill_bytes: int | None = None) -> None:
        self.work_dir = work_dir
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self._buffer: list[Any] = []
        self._bytes = 0

    def size(self, element: Any) -> int:
        raise NotImplementedError

    def spill(self, elements: list[Any]) -> Iterator[Any]:
        raise NotImplementedError

    def start_bundle(self) -> None:
        self._buffer, self._bytes = [], 0

    def process(self, element: Any) -> Iterator[Any]:
        self._buffer.append(element)
        self._bytes += self.size(element)
        if self._bytes >= self.spill_bytes:
            yield from self._drain()

    def finish_bundle(self) -> Iterator[Any]:
        for out in self._drain():
            yield GlobalWindows.windowed_value(out)

    def _drain(self) -> Iterator[Any]:
        elements, self._buffer, self._bytes = self._buffer, [], 0
        if elements:
            yield from self.spill(elements)  # may empty ``elements`` early to free the buffer
