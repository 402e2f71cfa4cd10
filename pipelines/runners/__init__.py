"""Where a pipeline runs: the runner chosen from ``--runner`` and Beam's options (``runner``: the in-process
FnApiRunner by default, worker processes with ``--direct_num_workers``, any Beam runner by name), our Dask runner
(``dask_runner``, ``dask_graph``), the entry point of local worker processes (``beam_worker``) and the SDK
container's boot for worker pools without Docker (``beam_boot``, the ``bertprep-beam-boot`` command)."""
