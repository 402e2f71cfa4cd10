"""A Beam pipeline (after Beam's Dask overrides) as one ``dask.bag`` graph: what :mod:`bertstream.pipelines.runners.dask_runner` runs.

Every bag holds ``WindowedValue``s, but a ParDo's, which holds ``(tag, WindowedValue)`` pairs: the tag is
kept until a consumer selects its own output (Beam 2.77 drops it, so each consumer of a multi-output ParDo
gets all of its outputs). A ParDo runs one bundle per partition (:func:`run_bundle`); what it emits in
``finish_bundle`` leaves with the rest (Beam 2.77 collects the outputs before ``finish_bundle``). Every task
returns a list: a partition may travel to another worker. Each stage runs once however many consumers read it
(side inputs are referred to by key, and the sinks are computed and optimized as one job).
A worker thread sets each DoFn up once per run and reuses it for every partition it runs, as Beam's own
runners reuse a DoFn across bundles.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import dask.bag as db
from apache_beam import pvalue
from apache_beam.internal import pickler
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, Receiver, _OutputHandler
from apache_beam.runners.dask.overrides import _Create, _Flatten, _GroupByKeyOnly, _Reshuffle
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue
from dask.bag.core import optimize as bag_optimize
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from bertstream.cli.errors import UsageError

Tagged = tuple[str | None, WindowedValue]


class _Collect(Receiver):
    """Receives one tag's outputs into the bundle's shared list, tagged."""

    def __init__(self, tag: str | None, out: list[Tagged]) -> None:
        self.tag = tag
        self.out = out

    def receive(self, windowed_value: WindowedValue) -> None:
        self.out.append((self.tag, windowed_value))


class _Receivers(dict):
    """A receiver per output tag, made on first use (a DoFn may emit to tags it never declared)."""

    def __init__(self, out: list[Tagged]) -> None:
        super().__init__()
        self.out = out

    def __missing__(self, tag: str | None) -> _Collect:
        receiver = self[tag] = _Collect(tag, self.out)
        return receiver


class _SetUp:
    """A DoFn unpickled and set up in this worker thread, with what its bundles need besides side inputs."""

    __slots__ = ("fn", "signature", "args", "kwargs", "window_fn", "label", "views", "invoker")

    def __init__(self, payload: bytes) -> None:
        self.fn, self.args, self.kwargs, self.window_fn, self.label, self.views = pickler.loads(payload)
        self.signature = DoFnSignature(self.fn)
        self.invoker: DoFnInvoker | None = None  # the first bundle's: it set the DoFn up, it tears it down


# Each worker thread's DoFns of the run it last worked for: run id -> {payload: set-up DoFn}. A DoFn is set up
# once per thread and run, not once per partition: a fresh one per bundle paid its setup (the tokenizer's
# load, its caches started cold) and the unpickling of its payload in every partition of every stage.
_local = threading.local()


def _dofn(payload: bytes, run: str) -> _SetUp:
    """This thread's set-up DoFn of ``payload`` in run ``run``; the DoFns of an earlier run are torn down."""
    cache: tuple[str, dict[bytes, _SetUp]] | None = getattr(_local, "cache", None)
    if cache is None or cache[0] != run:
        if cache is not None:
            for done in cache[1].values():
                if done.invoker is not None:
                    done.invoker.invoke_teardown()
        cache = _local.cache = (run, {})
    found = cache[1].get(payload)
    if found is None:
        found = cache[1][payload] = _SetUp(payload)
    return found


def run_bundle(
    elements: Iterable[WindowedValue], payload: bytes, side_values: list[list], run: str = ""
) -> Iterator[Tagged]:
    """One bundle of a ParDo over a partition: start, each element, finish, yielding each output as soon as it
    is made. The DoFn is this worker thread's for the run (``run``: its id), set up by its first bundle and
    reused by the next ones, as Beam's own runners reuse a DoFn across bundles; no two threads share one."""
    fn = _dofn(payload, run)
    out: list[Tagged] = []
    receivers = _Receivers(out)
    handler = _OutputHandler(
        window_fn=fn.window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    sides = [SideInputMap(view, options, values) for (view, options), values in zip(fn.views, side_values, strict=True)]
    invoker = DoFnInvoker.create_invoker(
        fn.signature,
        handler,
        context=DoFnContext(fn.label, state=None),
        side_inputs=sides,
        input_args=fn.args,
        input_kwargs=fn.kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    if fn.invoker is None:
        invoker.invoke_setup()
        fn.invoker = invoker
    invoker.invoke_start_bundle()
    for element in elements:
        invoker.invoke_process(element)
        yield from _drain(out)
    invoker.invoke_finish_bundle()
    yield from _drain(out)


def _drain(out: list[Tagged]) -> list[Tagged]:
    items = out[:]
    out.clear()
    return items


def run_partition(
    elements: Iterable[WindowedValue], payload: bytes, side_values: list[list], run: str = ""
) -> list[Tagged]:
    """A ParDo's partition task: :func:`run_bundle`'s outputs as a list. Every task of the graph returns a
    list, never an iterator: a partition read by tasks on another worker is sent there, and a generator cannot
    be (the worker failed to serialize it and the job hung)."""
    return list(run_bundle(elements, payload, side_values, run))


def select(tagged: Iterable[Tagged], tag: str | None) -> list[WindowedValue]:
    """The elements of one output of a ParDo."""
    return [wv for t, wv in tagged if t == tag]


def concat_lists(lists: Iterable[list]) -> list:
    return list(itertools.chain.from_iterable(lists))


def key_of(wv: WindowedValue) -> Any:
    return wv.value[0]


def grouped(groups: Iterable[tuple[Any, list[WindowedValue]]]) -> list[WindowedValue]:
    """``(key, [(key, reified value)...])`` -> one ``(key, [reified values])`` element, as Beam's GroupAlsoByWindow
    expects it."""
    return [GlobalWindows.windowed_value((key, [wv.value[1] for wv in elements])) for key, elements in groups]


def split_round_robin(elements: Iterable[Any], index: int, n: int) -> list[list]:
    """A partition's elements dealt over ``n`` buckets, starting at bucket ``index``: where each goes depends
    only on its position, so a recomputed partition (a worker lost) deals the same."""
    buckets: list[list] = [[] for _ in range(n)]
    for i, element in enumerate(elements, start=index):
        buckets[i % n].append(element)
    return buckets


def gather_bucket(j: int, splits: list[list[list]]) -> list:
    return [element for split in splits for element in split[j]]


def discard(elements: Iterable[Any]) -> list:
    """A sink's partition, run for its effects: nothing of it travels to the launcher."""
    for _ in elements:
        pass
    return []


def reshuffle(bag: db.Bag, n: int) -> db.Bag:
    """``bag`` dealt over ``n`` partitions: what ``Reshuffle`` promises (a spread, a fusion break)."""
    token = tokenize(bag, n)
    split_name, name = f"reshuffle-split-{token}", f"reshuffle-{token}"
    split: dict[Any, Any] = {(split_name, i): (split_round_robin, (bag.name, i), i, n) for i in range(bag.npartitions)}
    gather: dict[Any, Any] = {
        (name, j): (gather_bucket, j, [(split_name, i) for i in range(bag.npartitions)]) for j in range(n)
    }
    dependencies: list[Any] = [bag]
    graph = HighLevelGraph.from_collections(name, {**split, **gather}, dependencies=dependencies)
    return db.Bag(graph, name, n)


class GraphBuilder(PipelineVisitor):
    """Visits the pipeline's primitive transforms in order and builds each one's bag."""

    def __init__(self, npartitions: int, partition_size: int | None = None) -> None:
        self.npartitions = max(1, npartitions)
        self.run = uuid.uuid4().hex  # what the workers' DoFns are kept for (run_bundle)
        self.partition_size = partition_size
        self.bags: dict[AppliedPTransform, db.Bag] = {}
        self.tagged: set[AppliedPTransform] = set()  # ParDos: bags of (tag, value)
        self.consumed: set[AppliedPTransform] = set()
        self._outputs: dict[tuple[AppliedPTransform, str | None], db.Bag] = {}
        self._sides: dict[tuple[AppliedPTransform, str | None], db.Item] = {}

    def visit_transform(self, node: AppliedPTransform) -> None:
        t = node.transform
        inputs = [self._bag(pc) for pc in node.inputs if not isinstance(pc, pvalue.PBegin)]
        if isinstance(t, _Create):
            bag = self._create(t.values)
        elif isinstance(t, beam.ParDo):  # GroupAlsoByWindow included (Beam 2.77 skips it)
            bag = self._pardo(node, inputs[0])
            self.tagged.add(node)
        elif isinstance(t, _GroupByKeyOnly):
            bag = inputs[0].groupby(key_of).map_partitions(grouped)
        elif isinstance(t, _Flatten):
            bag = db.concat(inputs) if inputs else db.from_sequence([], npartitions=1)
        elif isinstance(t, _Reshuffle):
            bag = reshuffle(inputs[0], self.npartitions)
        else:
            raise UsageError(
                "runner", f"DaskRunner cannot run {node.full_label!r} ({type(t).__name__}): no Dask translation"
            )
        self.bags[node] = bag

    def job(self) -> db.Bag:
        """What to compute: the bags of every transform nobody consumes, each reduced to nothing, as one bag
        whose graph is optimized as one (dask optimizes each collection on its own, and fusing a chain into one
        sink's tasks under new keys ran a stage shared by several sinks once per sink). The side inputs' keys
        are kept through the fusion: the ParDos that read them refer to them by key."""
        sink = db.concat([bag.map_partitions(discard) for node, bag in self.bags.items() if node not in self.consumed])
        sides = [side.key for side in self._sides.values()]
        return db.Bag(
            bag_optimize(sink.__dask_graph__(), sink.__dask_keys__(), fuse_keys=sides), sink.name, sink.npartitions
        )

    def _create(self, values: Iterable[Any]) -> db.Bag:
        items = [GlobalWindows.windowed_value(v) for v in values]
        if self.partition_size:
            return db.from_sequence(items, partition_size=self.partition_size)
        return db.from_sequence(items, npartitions=max(1, min(len(items), self.npartitions)))

    def _bag(self, pc: Any) -> db.Bag:
        producer = pc.producer
        self.consumed.add(producer)
        if producer not in self.tagged:
            return self.bags[producer]
        key = (producer, pc.tag)
        if key not in self._outputs:
            self._outputs[key] = self.bags[producer].map_partitions(select, pc.tag)
        return self._outputs[key]

    def _side(self, pc: Any) -> db.Item:
        """A side input's elements as one value, computed once for every partition that reads it."""
        key = (pc.producer, pc.tag)
        if key not in self._sides:
            self._sides[key] = self._bag(pc).reduction(list, concat_lists)
        return self._sides[key]

    def _pardo(self, node: AppliedPTransform, bag: db.Bag) -> db.Bag:
        t: Any = node.transform
        args, kwargs = t.raw_side_inputs
        main = next(iter(node.main_inputs.values()))
        window_fn = main.windowing.windowfn if hasattr(main, "windowing") else None
        views = [(type(si), si._view_options()) for si in node.side_inputs]
        payload = pickler.dumps((t.fn, list(args), kwargs, window_fn, t.label, views))
        sides = [self._side(si.pvalue) for si in node.side_inputs]
        # Tasks written out rather than map_partitions(..., sides): map_partitions rebuilds an argument that is
        # a Dask collection under fresh keys (dask's ProhibitReuse), so every stage upstream of a side input ran
        # again for each side input that reads it. Here each partition refers to the side input by its key.
        name = f"pardo-{t.label}-{tokenize(bag.name, payload, [s.key for s in sides], self.run)}"
        # Dask's tuple form (as reshuffle's): keys in the task, the list of side-input keys included, stand for
        # their values; it reads the same on every dask this package accepts.
        values = [s.key for s in sides]
        tasks: dict[Any, Any] = {
            (name, i): (run_partition, (bag.name, i), payload, values, self.run) for i in range(bag.npartitions)
        }
        dependencies: list[Any] = [bag, *sides]
        graph = HighLevelGraph.from_collections(name, tasks, dependencies=dependencies)
        return db.Bag(graph, name, bag.npartitions)
