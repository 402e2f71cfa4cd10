"""What every featurizer shares: the checkpoint's tokenizer, ragged Arrow columns, the wire format, sharding info.

``TaskTokenizer`` is the pretraining tokenizer (``load_tokenizer``'s JSON: ids identical to
``BertTokenizerFast``) with the pretraining pipeline's handling of literal special-token strings typed in
the text: they are blanked (with spaces of the same length, so character offsets stay valid) and counted.

Featurized rows cross stages as Arrow IPC stream bytes: the task schema's columns (no metadata) plus
``GLOBAL``, the global index of the record each row came from, which the writer uses to pick the shard and
drops before writing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.source_stats import UNK_TOKENS
from bertstream.pipelines.tasks.read import RecordBatch
from bertstream.pipelines.tokenizer.load import TokenizerSpec, set_tokenizer_threads
from bertstream.schemas import id_types
from bertstream.schemas import tasks as T
from bertstream.schemas.vocab import CLS, SEP, UNK

GLOBAL = "_global"


class TaskTokenizer:
    """Pure tokenization for task featurizers; built once per worker from a ``TokenizerSpec``."""

    def __init__(self, spec: TokenizerSpec) -> None:
        # One thread per Beam worker: the runner parallelises over workers already. Set, not defaulted: a worker
        # forked from a process whose pretraining run had set it "true" (set_tokenizer_threads) inherited that
        # process's Rayon pool without its threads, and its first encode_batch waited forever.
        set_tokenizer_threads(1)
        self.tokenizer = Tokenizer.from_str(spec.json)
        self.vocab = spec.vocab
        self.cls_id, self.sep_id, self.unk_id = spec.vocab.id(CLS), spec.vocab.id(SEP), spec.vocab.id(UNK)
        self.dtype = id_types.numpy_dtype(spec.vocab.id_type)
        added = sorted((t.content for t in self.tokenizer.get_added_tokens_decoder().values()), key=len, reverse=True)
        self._literal = re.compile("|".join(re.escape(t) for t in added))
        # Without offsets where none are needed (several times faster).
        self._encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)

    def clean(self, text: str, tally: Tally) -> str:
        """Blank literal special tokens (``"[SEP]"`` typed in text), keeping every other character's offset."""
        if "[" not in text:
            return text
        n = 0

        def blank(m: re.Match) -> str:
            nonlocal n
            n += 1
            return " " * len(m.group())

        text = self._literal.sub(blank, text)
        tally.add(C.SPECIAL_LITERALS, n)
        return text

    def ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """WordPiece ids of each (cleaned) text, no specials: ``[len_i]`` int64 each."""
        if not texts:
            return []
        return [np.asarray(e.ids, dtype=np.int64) for e in self._encode(list(texts), add_special_tokens=False)]

    def ids_and_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Ids ``[n]`` and character offsets ``[n, 2]`` (start, end) into each original text."""
        if not texts:
            return []
        out = []
        for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False):
            offsets = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)
            out.append((np.asarray(e.ids, dtype=np.int64), offsets))
        return out

    def word_ids(self, sentences: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pre-tokenized sentences -> ids ``[n]`` and the word index of each id ``[n]`` (words without any
        token do not appear)."""
        if not sentences:
            return []
        out = []
        for e in self.tokenizer.encode_batch(
            [list(s) for s in sentences], is_pretokenized=True, add_special_tokens=False
        ):
            out.append(
                (np.asarray(e.ids, dtype=np.int64), np.asarray([-1 if w is None else w for w in e.word_ids], np.int64))
            )
        return out


def ragged(rows: Sequence[np.ndarray], t: pa.DataType) -> pa.Array:
    """A ``list<t>`` column from per-row arrays (offsets int32: a batch holds far fewer than 2**31 values)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(rows) if len(rows) else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.dtype(str(t))), type=t))


def table(
    layout: T.RowLayout, id_type: str, columns: Mapping[str, pa.Array | np.ndarray | list], global_index: np.ndarray
) -> pa.Table:
    """Rows of ``layout`` (columns in its order, plus ``GLOBAL``) ready for the wire."""
    schema = pa.schema(layout.fields(id_types.arrow_type(id_type)))
    arrays = [
        columns[f.name] if isinstance(columns[f.name], pa.Array) else pa.array(columns[f.name], type=f.type)
        for f in schema
    ]
    schema = schema.append(pa.field(GLOBAL, pa.int64(), nullable=False))
    return pa.Table.from_arrays(arrays + [pa.array(np.asarray(global_index, dtype=np.int64))], schema=schema)


def to_wire(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as writer:
        writer.write_table(t)
    return sink.getvalue().to_pybytes()


def from_wire(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(data)).read_all()


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each file's records start in the global record order: ``offsets[file_index]`` and ``total``."""

    offsets: dict[int, int]
    total: int

    @classmethod
    def from_counts(cls, counts: Sequence[tuple[int, int]]) -> Layout:
        offsets, total = {}, 0
        for file_index, n in sorted(counts):
            offsets[file_index] = total
            total += n
        return cls(offsets, total)

    def global_index(self, batch: RecordBatch, i: int) -> int:
        return self.offsets[batch.file_index] + batch.start + i

    def shard_of(self, global_index: np.ndarray, num_shards: int) -> np.ndarray:
        """Contiguous ranges of records per shard, so all windows of a record share its shard."""
        return (np.asarray(global_index, dtype=np.int64) * num_shards // max(self.total, 1)).astype(np.int64)


Featurizer = Callable[[RecordBatch, list, Layout, Tally], pa.Table]


def unknown_label_error(label: str, labels: Sequence[str], place: str, source: str) -> InputError:
    """An evaluation split's label outside the run's set (a labelled kind's featurizer raises it: the ids would lie)."""
    return InputError(
        f"{place}: label {label!r} is not in the label set {list(labels)} ({source}); an evaluation "
        "split must use the training split's labels"
    )


def check_windows(count: int, place: str, advice: str) -> None:
    """A record is cut into at most ``T.MAX_WINDOWS`` windows (a row id holds 16 bits of window); past it, one line
    (a ValueError with a details log before: a 4 MB char-tag file of one sentence is 71,429 windows at 16 tokens)."""
    if count > T.MAX_WINDOWS:
        raise InputError(f"{place}: {count:,} windows, more than a row id holds ({T.MAX_WINDOWS:,}): {advice}")


class _FeaturizeFn(beam.DoFn):
    def __init__(self, make: Callable[[], Featurizer]) -> None:
        self.make = make
        self.featurize: Featurizer | None = None

    def setup(self) -> None:
        self.featurize = self.make()

    def process(self, batch: RecordBatch, labels: list[str], layout: Layout) -> Iterator:
        tally = Tally()
        assert self.featurize is not None, "setup() runs before process()"
        out = self.featurize(batch, labels, layout, tally)
        tok = getattr(self.featurize, "tok", None)  # every kind's featurizer encodes with a TaskTokenizer
        if isinstance(tok, TaskTokenizer) and out.num_rows and "input_ids" in out.column_names:
            # [UNK] ids written, for the summary's rate (a Chinese task under an English vocabulary: every
            # token, exit 0 and no word before)
            ids = pc.list_flatten(out.column("input_ids"))
            tally.add(UNK_TOKENS, int(pc.sum(pc.equal(ids, tok.unk_id)).as_py() or 0))
        tally.report()
        if out.num_rows:
            yield to_wire(out)
        yield beam.pvalue.TaggedOutput("tallies", tally)


class Featurize(beam.PTransform):
    """``PCollection[RecordBatch]`` -> ``{"features": wire bytes, "tallies": Tally}``.

    ``make`` builds the kind's pure featurizer once per worker (e.g. ``partial(RowFeaturizer, spec, ...)``);
    ``labels`` (list of names) and ``layout`` (``Layout``) are singleton side inputs.
    """

    def __init__(self, make: Callable[[], Featurizer], *, labels, layout) -> None:
        super().__init__()
        self.fn = _FeaturizeFn(make)
        self.labels = labels
        self.layout = layout

    def expand(self, batches):
        out = batches | "Encode" >> beam.ParDo(
            self.fn, labels=beam.pvalue.AsSingleton(self.labels), layout=beam.pvalue.AsSingleton(self.layout)
        ).with_outputs("tallies", main="features")
        return {"features": out.features, "tallies": out.tallies}
