"""Beam 2.77's DaskRunner sends every output of a multi-output ParDo to each consumer of any one of them.

    python scripts/dask_runner_repro.py      # exit 0: fixed; exit 1: the defect is there (Beam 2.77 + Dask)

A ParDo yields its main output and a ``TaggedOutput("odd", x)``; a Map reads only the ``odd`` output.
FnApiRunner gives that Map [1, 3, 5]; DaskRunner gives it all nine outputs, main and tagged alike
([0, 1, 1, 2, 3, 3, 4, 5, 5]).

Cause (apache_beam/runners/dask/): ``DaskBagVisitor.visit_transform`` (dask_runner.py:192-194) looks up the
input bag by ``input_value.producer`` only, so all outputs of one ParDo share a single bag whatever their
tag, and ``get_windowed_value`` (transform_evaluator.py:62) unwraps ``TaggedOutput`` elements into plain
values. bertstream's ``Group`` stage (``BuildPool``: main ``units`` and tagged ``groups``) hits it: the
group-size dicts reach ``CreateInstances``, which fails with
``AttributeError: 'dict' object has no attribute 'pool_path'``.
"""

from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


class SplitOdd(beam.DoFn):
    def process(self, x):
        yield x
        if x % 2:
            yield beam.pvalue.TaggedOutput("odd", x)


def odd_seen(beam_args: list[str], folder: str) -> list[int]:
    """What the consumer of the ``odd`` output received (written by the workers to ``folder``)."""
    import glob
    import os
    import uuid

    def record(x):
        with open(os.path.join(folder, uuid.uuid4().hex), "w") as f:
            f.write(str(x))

    p = beam.Pipeline(options=PipelineOptions(beam_args))
    outputs = p | beam.Create(range(6)) | beam.ParDo(SplitOdd()).with_outputs("odd", main="all")
    _ = outputs.odd | "RecordOdd" >> beam.Map(record)
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        if hasattr(result, "client"):
            result.client.close()  # DaskRunner opens a Client and never closes it (dask_runner.py:241)
    return sorted(int(open(f).read()) for f in glob.glob(os.path.join(folder, "*")))


def main() -> int:
    import tempfile

    from dask.distributed import LocalCluster

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        print("FnApiRunner:", odd_seen([], a))
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            seen = odd_seen([f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}"], b)
        print("DaskRunner: ", seen)
    if seen == [1, 3, 5]:
        print("fixed: the odd output holds only the odd elements")
        return 0
    print("DEFECT: the consumer of TaggedOutput 'odd' also received the main output")
    return 1


if __name__ == "__main__":
    sys.exit(main())
