"""Task datasets in memory: read through the manifest with pyarrow, checked, batched with dynamic padding.

Task datasets are small (GLUE, CoNLL, SQuAD: at most a few hundred MB), so every shard is read whole,
verified against the manifest's sha256, and kept as numpy columns: ragged list columns as flat values
plus offsets. ``EpochBatches`` plans each rank's batches: a fresh seeded permutation per epoch for
training (padded by wrapping around so every rank runs the same number of steps, as
``DistributedSampler``), every row exactly once, in order, for evaluation.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import Dataset

from bertstream.schemas import json_text
from bertstream.schemas import tasks as T
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, load_vocab, manifest_source
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import Vocab, VocabMismatchError
from bertstream.trainer.data.refs import read_text
from bertstream.trainer.errors import UserError
from bertstream.trainer.weights_init import derive_seed

PAD_MULTIPLE = 8  # tensor-core friendly sequence lengths


class TaskDataError(UserError, ValueError):
    """A task dataset is missing, corrupt, of the wrong kind, or does not fit the other split or the model."""


@dataclass(frozen=True, slots=True)
class Ragged:
    """A list column: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``."""

    values: np.ndarray
    offsets: np.ndarray  # [rows + 1]

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_arrow(cls, column: pa.ChunkedArray) -> Ragged:
        arr = pa.concat_arrays(column.chunks) if column.num_chunks != 1 else column.chunk(0)
        offsets = arr.offsets.to_numpy().astype(np.int64)
        return cls(arr.flatten().to_numpy(), offsets - offsets[0])


@dataclass(slots=True)
class TaskData:
    """One split of a task dataset: its manifest, label names, vocabulary and columns."""

    root: str
    manifest: Manifest
    vocab: Vocab
    columns: dict[str, Any]  # field name -> numpy array (scalar fields) or Ragged (list fields)
    examples: list[dict] = field(default_factory=list)  # SQuAD: examples.jsonl, line i = example_index i

    @property
    def kind(self) -> str:
        return self.manifest.kind

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.manifest.task.get("labels") or ())

    @property
    def labeled(self) -> bool:
        return bool(self.manifest.task.get("labeled", True))

    @property
    def glue(self) -> str | None:
        return self.manifest.task.get("glue")

    @property
    def pad_id(self) -> int:
        return self.manifest.pad_id

    def __len__(self) -> int:
        return len(self.columns[T.ROW_ID])


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class DataTask(Protocol):
    """What reading a split needs of its task (``bertstream.trainer.finetune.tasks.Task``): the kind it reads,
    each row's sequences, and the kind's own checks of the columns and the files beside them."""

    kind: ClassVar[str]
    layout: ClassVar[T.RowLayout]  # the contract's row layout its data must record (``task.layout``)

    def sequences(self, data: TaskData) -> tuple[np.ndarray, np.ndarray]: ...

    def row_problems(self, data: TaskData, lengths: np.ndarray) -> list[tuple[np.ndarray, str]]: ...

    def check_data(self, data: TaskData, source: str) -> None: ...


def task_manifest(
    root: str, role: str, *, missing: str = "no {}; give a folder written by `bertprep task`"
) -> Manifest:
    """The manifest of a task dataset folder, refused unless a fine-tuning task's (``missing``: what to say
    without one, ``{}`` the manifest's name)."""
    source = f"{role} {manifest_source(root)}"
    try:
        manifest = Manifest.from_json(read_text(root, MANIFEST_NAME), source=source)
        T.layout_of(manifest.kind, manifest.task, source=source)  # a task dataset's, of a layout of the contract
    except FileNotFoundError:
        raise TaskDataError(f"{role} {root}: {missing.format(MANIFEST_NAME)}") from None
    except SchemaError as e:
        raise TaskDataError(str(e)) from None
    return manifest


def load_task_data(root: str, task: DataTask, *, role: str = "data") -> TaskData:
    """Read and check a task dataset folder (local path or fsspec URL) holding ``task.kind`` rows.

    ``role`` names the flag in errors (``--train-data``, ``--eval-data``).
    """
    kind = task.kind
    manifest = task_manifest(root, role)
    if manifest.kind != kind:
        raise TaskDataError(f"{role} {root} holds a {manifest.kind!r} task but --task is {kind!r}")
    layout = T.layout_of(kind, manifest.task)
    if layout != task.layout:
        raise TaskDataError(f"{role} {root}: its rows are {layout.name} rows; the {kind} task reads {task.layout.name}")
    try:
        vocab = load_vocab(
            manifest, lambda name: read_text(root, name), f"{role} {root.rstrip('/')}/{manifest.vocab_file}"
        )
    except VocabMismatchError as e:
        raise TaskDataError(str(e)) from None
    labels = list(manifest.task.get("labels") or [])

    tables = []
    for shard in manifest.shards:
        if shard.format != "arrow":
            raise TaskDataError(f"{role} {root}: shard {shard.path} has format {shard.format!r}; task shards are arrow")
        try:
            raw = read_text(root, shard.path)
        except FileNotFoundError:
            raise TaskDataError(
                f"{role} {root}: shard {root.rstrip('/')}/{shard.path} is missing (listed in "
                f"the manifest, sha256 {shard.sha256}): re-run bertprep task"
            ) from None
        except OSError as e:
            raise TaskDataError(
                f"{role} {root}: shard {root.rstrip('/')}/{shard.path} cannot be read ({type(e).__name__}: {e})"
            ) from None
        if len(raw) != shard.bytes or _sha256(raw) != shard.sha256:
            raise TaskDataError(
                f"{role} {root}: shard {root.rstrip('/')}/{shard.path} does not match the manifest (sha256 "
                f"{shard.sha256}, {shard.bytes} bytes; read {len(raw)} bytes): re-run bertprep task"
            )
        try:  # offsets are untrusted as any field: validated before numpy reads through them
            table = pa.ipc.open_file(pa.BufferReader(raw)).read_all()
            table.validate(full=True)
        except (pa.ArrowException, OSError) as e:
            raise TaskDataError(
                f"{role} {root}: shard {shard.path} does not decode ({type(e).__name__}: {e})"
            ) from None
        try:
            T.check_schema(table.schema, kind, layout, source=f"{root}/{shard.path}")
        except SchemaError as e:
            raise TaskDataError(str(e)) from None
        meta = T.read_metadata(table.schema)
        if meta["vocab_sha256"] != manifest.vocab_sha256 or meta["labels"] != labels:
            raise TaskDataError(
                f"{role} {root}: shard {shard.path} disagrees with the manifest on the vocabulary or the label list"
            )
        if table.num_rows != shard.count:
            raise TaskDataError(f"{role} {root}: shard {shard.path} has {table.num_rows} rows, manifest {shard.count}")
        tables.append(table)
    if not tables:
        raise TaskDataError(f"{role} {root}: the manifest lists no shards")
    table = pa.concat_tables(tables)
    columns: dict[str, Any] = {}
    for name in layout.field_names():
        col = table.column(name)
        if pa.types.is_list(col.type):
            columns[name] = Ragged.from_arrow(col)
        elif pa.types.is_string(col.type):
            columns[name] = col.to_pylist()
        elif col.null_count and table.schema.field(name).nullable:  # a label (the one nullable field): unlabeled
            if manifest.task.get("labeled", True):
                raise TaskDataError(f"{role} {root}: {col.null_count} rows lack a {name} but the split is labeled")
            columns[name] = None
        else:
            columns[name] = col.to_numpy()
    data = TaskData(root=root, manifest=manifest, vocab=vocab, columns=columns)
    _check_rows(data, task, f"{role} {root}")
    task.check_data(data, f"{role} {root}")
    return data


def _check_rows(data: TaskData, task: DataTask, source: str) -> None:
    """Range checks of the rows, as the pretraining reader's: rows that no ``bertprep task`` writes would index
    past the embeddings or the padded batch (a traceback mid-epoch) or train on garbage. What every kind shares
    here (each sequence's length, every id in the vocabulary); the kind's own columns: ``task.row_problems``."""
    c = data.columns
    if len(data) == 0:
        raise TaskDataError(f"{source}: holds no rows (the manifest lists no shard rows)")
    ids: Ragged = c[T.INPUT_IDS]
    lengths, owner = task.sequences(data)  # [S] each: a sequence's tokens and its row
    longest = data.manifest.task.get("max_seq_length") or data.manifest.shard_parameters.max_seq_length
    rows = np.arange(len(data))
    problems = [
        (np.isin(rows, owner[lengths < 2]), "has fewer than 2 tokens ([CLS] ... [SEP])"),
        (
            np.isin(rows, owner[lengths > (longest or np.iinfo(np.int64).max)]),
            f"is longer than the manifest's max_seq_length {longest}",
        ),
    ]
    outside = np.flatnonzero((ids.values < 0) | (ids.values >= len(data.vocab)))
    if outside.size:
        row = int(np.searchsorted(ids.offsets, outside[0], side="right")) - 1
        problems.append((rows == row, f"holds an id outside the vocabulary's 0..{len(data.vocab) - 1}"))
    problems += task.row_problems(data, ids.lengths())
    for bad, what in problems:
        hits = np.flatnonzero(bad)
        if hits.size:
            raise TaskDataError(f"{source}: row {int(hits[0])} {what}")


def load_examples(data: TaskData, source: str) -> list[dict]:
    """The examples file beside the shards (``examples.jsonl``: SQuAD's), checked against the manifest."""
    root, manifest = data.root, data.manifest
    entry = next((f for f in manifest.task.get("files", []) if f.get("role") == "examples"), None)
    if entry is None:
        raise TaskDataError(f"{source}: the manifest lists no {T.EXAMPLES_FILE} (task.files)")
    raw = read_text(root, entry["path"])
    if _sha256(raw) != entry["sha256"]:
        raise TaskDataError(f"{source}: {entry['path']} does not match the manifest's sha256 {entry['sha256']}")
    try:
        examples = [json_text.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TaskDataError(f"{source}: {entry['path']} is no JSON lines ({e})") from None
    if len(examples) != entry["count"]:
        raise TaskDataError(f"{source}: {entry['path']} has {len(examples)} examples, manifest {entry['count']}")
    return examples


# ----------------------------------------------------------------------------------------------- batching


class RowTask(Protocol):
    """What batching needs of a task (``bertstream.trainer.finetune.tasks``): its row fields and its batches."""

    def row_fields(self, columns: Mapping[str, Any], i: int) -> dict[str, Any]: ...

    def collate(self, rows: Sequence[Mapping[str, Any]], *, pad_id: int, multiple: int) -> dict[str, torch.Tensor]: ...


class TaskDataset(Dataset):
    """Row ``i`` as a dict of numpy values (unpadded): ``index``, ``input_ids`` and the task's own fields."""

    def __init__(self, data: TaskData, task: RowTask) -> None:
        self.data, self.task = data, task

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, Any]:
        c = self.data.columns
        return {"index": i, "input_ids": c[T.INPUT_IDS][i], **self.task.row_fields(c, i)}


def collate(
    rows: Sequence[dict[str, Any]], *, task: RowTask, pad_id: int, multiple: int = PAD_MULTIPLE
) -> dict[str, torch.Tensor]:
    """The task's batch of ``rows`` (``Task.collate``): inputs padded with ``pad_id`` to a multiple of
    ``multiple``, ``index`` [B] (dataset rows) and the task's targets."""
    return task.collate(rows, pad_id=pad_id, multiple=multiple)


def pad_sequences(
    sequences: Sequence[np.ndarray], segment_a: Sequence[int] | None, *, pad_id: int, multiple: int = PAD_MULTIPLE
) -> dict[str, torch.Tensor]:
    """Sequences padded to the longest rounded up to ``multiple``: input_ids, token_type_ids (1 from
    ``segment_a[i]`` on; all 0 without segments) and attention_mask, [N, T] each."""
    n = len(sequences)
    t = multiple * math.ceil(max(len(s) for s in sequences) / multiple)
    input_ids = np.full((n, t), pad_id, dtype=np.int64)
    attention = np.zeros((n, t), dtype=np.int64)
    token_type = np.zeros((n, t), dtype=np.int64)
    for i, s in enumerate(sequences):
        length = len(s)
        input_ids[i, :length] = s
        attention[i, :length] = 1
        if segment_a is not None:
            token_type[i, segment_a[i] : length] = 1
    return {
        "input_ids": torch.from_numpy(input_ids),
        "token_type_ids": torch.from_numpy(token_type),
        "attention_mask": torch.from_numpy(attention),
    }


class EpochBatches:
    """Lists of row indices for one rank; a ``batch_sampler`` for ``torch.utils.data.DataLoader``.

    ``shuffle=True`` (training): epoch ``e`` is the permutation drawn from ``derive_seed(seed, "finetune/epoch-e")``,
    extended by wrapping around to a multiple of ``world_size``; rank ``r`` takes positions ``r, r + W, ...``, so
    every rank has the same number of rows and steps. ``shuffle=False`` (evaluation): rows ``r, r + W, ...`` in
    order, each row on exactly one rank (ranks may differ by one row; evaluation has no collectives per step).
    """

    def __init__(
        self, num_rows: int, batch_size: int, *, shuffle: bool, seed: int = 0, world_size: int = 1, rank: int = 0
    ) -> None:
        if num_rows < 1:
            raise TaskDataError("the dataset has no rows")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.num_rows, self.batch_size, self.shuffle = num_rows, batch_size, shuffle
        self.seed, self.world_size, self.rank = seed, world_size, rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def rank_indices(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_rows)[self.rank :: self.world_size]
        rng = np.random.default_rng(derive_seed(self.seed, f"finetune/epoch-{self.epoch}"))
        order = rng.permutation(self.num_rows)
        total = self.world_size * math.ceil(self.num_rows / self.world_size)
        order = np.resize(order, total)  # wraps around: the first rows again
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        idx = self.rank_indices().tolist()
        for i in range(0, len(idx), self.batch_size):
            yield idx[i : i + self.batch_size]

    def __len__(self) -> int:
        n = (
            math.ceil(self.num_rows / self.world_size)
            if self.shuffle
            else len(range(self.rank, self.num_rows, self.world_size))
        )
        return math.ceil(n / self.batch_size)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "seed": self.seed, "num_rows": self.num_rows, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if not isinstance(state, dict):  # from a checkpoint's state.json: untrusted
            raise ValueError(f"batch plan state {state!r} is not an object")
        if (state.get("seed"), state.get("num_rows"), state.get("world_size")) != (
            self.seed,
            self.num_rows,
            self.world_size,
        ):
            raise ValueError(f"batch plan state {state} is for another seed, dataset or world size")
        epoch = state.get("epoch")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 1 << 32:
            raise ValueError(f"batch plan state's epoch {epoch!r} is not an epoch count")
        self.epoch = epoch
