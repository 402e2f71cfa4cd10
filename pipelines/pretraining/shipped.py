"""Large read-only values that a stage's DoFns need (the tokenizer, the vocabulary), sent to the workers by
reference instead of inside the DoFn.

Beam pickles every DoFn when the graph is built and again when it is translated (cloudpickle, then zlib at
level 9), and unpickles it in every bundle processor it creates: a 30,522-token tokenizer and vocabulary
(~440 KB pickled) cost ~60 ms to pickle and ~35 ms to unpickle each time, about a second of every run on its
own. The launcher writes the value once into the run's work folder (which every worker reads, as it reads
the spill files); a DoFn carries the path and the digest, and :meth:`Shipped.get` loads the value once per
process. The file is the launcher's own pickle, checked against its digest before it is unpickled.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common.spill import write_file

T = TypeVar("T")

_CACHE: dict[str, Any] = {}  # digest -> value, per process
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Shipped(Generic[T]):
    """A value written to ``path`` by :func:`ship`; ``sha256`` is the digest of its pickle."""

    path: str
    sha256: str

    def get(self) -> T:
        """The value: from this process's cache, else read from ``path`` (once) and checked."""
        with _LOCK:
            if self.sha256 not in _CACHE:
                with FileSystems.open(self.path, compression_type="uncompressed") as f:
                    data = f.read()
                digest = hashlib.sha256(data).hexdigest()
                if digest != self.sha256:
                    raise RuntimeError(
                        f"{self.path}: sha256 {digest}, expected {self.sha256} (changed after the run began)"
                    )
                _CACHE[self.sha256] = pickle.loads(data)
            return _CACHE[self.sha256]


def ship(value: T, work_dir: str, name: str) -> Shipped[T]:
    """Write ``value`` into ``work_dir`` (removed with it at the end of the run) and return its reference."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    digest = hashlib.sha256(data).hexdigest()
    path = FileSystems.join(work_dir, f"{name}-{digest[:16]}.pickle")
    write_file(path, [data])
    with _LOCK:
        _CACHE[digest] = value  # the launcher's in-process workers need not read it back
    return Shipped(path, digest)


def resolve(value: T | Shipped[T]) -> T:
    """``value`` itself, or the value a :class:`Shipped` refers to (stages take either: tests pass values)."""
    return value.get() if isinstance(value, Shipped) else value
