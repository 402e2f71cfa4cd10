"""Two defects of Beam 2.77's DaskRunner that stop bertstream's pipeline, each shown on a few elements, on
Beam's runner and on ours (``bertstream.pipelines.runners.dask_runner``, which fixes them; ``--runner DaskRunner`` in bertprep).

    python scripts/tools/dask_runner_repro.py   # exit 0: ours passes both (Beam's result printed); 1: ours fails one

On Beam 2.77 it prints both defects for Beam's runner and none for ours. The day Beam's own passes, it says so:
then ``pipelines/runners/dask_runner.py`` may shrink to what Beam still lacks.

1. What a DoFn emits in ``finish_bundle`` is lost. A DoFn that buffers its elements and emits them at the end
   of the bundle (as bertstream's spill stages do) passes 6 elements on FnApiRunner and none on DaskRunner.
   bertstream detects the loss: Finalize fails the run ("documents lost between tokenizing and grouping").
2. Every output of a multi-output ParDo goes to each consumer of any one of them:

A ParDo yields its main output and a ``TaggedOutput("odd", x)``; a Map reads only the ``odd`` output.
FnApiRunner gives that Map [1, 3, 5]; DaskRunner gives it all nine outputs, main and tagged alike
([0, 1, 1, 2, 3, 3, 4, 5, 5]).

Cause, two places in apache_beam/runners/dask/ (Beam 2.77):
- transform_evaluator.py:198, ``apply_dofn_to_bundle``: ``results = [v.value for v in tagged_receivers.values]``
  drops the ``TaggedOutput`` wrapper of every tagged output (main outputs leave as bare values, tagged ones
  as ``WindowedValue``s): the tag is gone before anything could route by it. (The same line also runs
  before ``invoke_finish_bundle()``, so anything a DoFn emits in ``finish_bundle`` is lost.)
- dask_runner.py:192-194, ``DaskBagVisitor.visit_transform``: a consumer's input bag is looked up by
  ``input_value.producer`` alone, so every output PCollection of one ParDo is the same bag.
bertstream's ``Group`` stage (``BuildPool``: main ``units``, tagged ``groups``) hits it: the group-size dicts
reach ``CreateInstances``, which fails with ``AttributeError: 'dict' object has no attribute 'pool_path'``.
With both places fixed (``pipelines/runners/dask_graph.py``: outputs keep their tag, those of ``finish_bundle``
included, and each consumer selects its own), the pretraining and task pipelines run on a Dask cluster and
write the same bytes as FnApiRunner (``tests/pipelines/test_runners.py``).

Also seen on the same runner: only the graph of the last transform applied is computed (dask_runner.py:251),
so a branch that does not feed it never runs (bertstream's last transform, WriteManifest, is fed by all);
a side input's producing graph is computed again inside every consuming partition (transform_evaluator.py:95,
``list(self.bag)``), so its upstream runs once per partition (bertstream would redo Read..Tokenize for the
counters and Group, pool files included, for the group sizes); the Client it opens is never closed
(dask_runner.py:241). Ours fixes those too (see its docstring).
"""

from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

BEAM_DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
OUR_DASK_RUNNER = "bertstream.pipelines.runners.dask_runner.DaskRunner"


class EmitAtEnd(beam.DoFn):
    """Buffers a bundle's elements and emits them in ``finish_bundle``."""

    def start_bundle(self):
        self.buffer = []

    def process(self, x):
        self.buffer.append(x)

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        for x in self.buffer:
            yield GlobalWindows.windowed_value(x)


class SplitOdd(beam.DoFn):
    def process(self, x):
        yield x
        if x % 2:
            yield beam.pvalue.TaggedOutput("odd", x)


def seen(beam_args: list[str], folder: str, defect: str) -> list[int]:
    """What the last Map of the defect's pipeline received (written by the workers to ``folder``)."""
    import glob
    import os
    import uuid

    def record(x):
        with open(os.path.join(folder, uuid.uuid4().hex), "w") as f:
            f.write(str(x))

    p = beam.Pipeline(options=PipelineOptions(beam_args))
    numbers = p | beam.Create(range(6))
    if defect == "finish_bundle":
        _ = numbers | beam.ParDo(EmitAtEnd()) | "Record" >> beam.Map(record)
    else:
        outputs = numbers | beam.ParDo(SplitOdd()).with_outputs("odd", main="all")
        _ = outputs.odd | "RecordOdd" >> beam.Map(record)
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        if hasattr(result, "client"):
            result.client.close()  # DaskRunner opens a Client and never closes it (dask_runner.py:241)
    return sorted(int(open(f).read()) for f in glob.glob(os.path.join(folder, "*")))


def main() -> int:
    import os
    import tempfile

    from dask.distributed import LocalCluster

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # ours, from a checkout
    expected = {"finish_bundle": [0, 1, 2, 3, 4, 5], "tagged_output": [1, 3, 5]}
    ours_failed = 0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        for runner in (BEAM_DASK_RUNNER, OUR_DASK_RUNNER):
            dask = [f"--runner={runner}", f"--dask_client_address={cluster.scheduler_address}"]
            for defect, want in expected.items():
                with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                    ref, got = seen([], a, defect), seen(dask, b, defect)
                print(f"{defect}: FnApiRunner {ref}, {runner} {got}")
                assert ref == want
                if got != want:
                    print(f"  DEFECT: {runner}'s {defect} output differs")
                    ours_failed += runner == OUR_DASK_RUNNER
                elif runner == BEAM_DASK_RUNNER:
                    print(
                        f"  Beam's DaskRunner passes {defect} now: pipelines/runners/dask_runner.py may drop that fix"
                    )
    return 1 if ours_failed else 0


if __name__ == "__main__":
    sys.exit(main())
