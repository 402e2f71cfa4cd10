"""Apache Beam pipelines that write what ``schemas`` defines; never imports ``trainer``."""

from bertstream.pipelines.runners.heap import quiet_beam_import

quiet_beam_import()  # Beam's import, ~150,000 long-lived objects, without the collector's scans (runners/heap.py)
