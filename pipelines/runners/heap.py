"""The cyclic garbage collector against the objects every run shares.

Building and running a Beam graph allocates enough for the collector's oldest generation to be scanned during
the run, and the interpreter scans everything again, several times, when it exits: each scan walks the
~150,000 objects that importing Beam, pyarrow and numpy created, which live as long as the process. On a 20 KB
input those scans were a fifth of the run (0.3-0.5 s of ~2 s: ``benchmarks/startup.py``). Frozen, they are
skipped by every later collection; they stay alive, as they would anyway.
"""

from __future__ import annotations

import gc

_frozen = [False]


def freeze_imported_objects() -> None:
    """Move every object alive now into the collector's permanent generation, once a process (before its first
    run: then they are the imports, the caller's own state and its pending garbage, if any, which is kept). Not
    again: a later run's freeze would keep the earlier run's graph, a cycle collected otherwise."""
    if _frozen[0]:
        return
    _frozen[0] = True
    gc.freeze()
