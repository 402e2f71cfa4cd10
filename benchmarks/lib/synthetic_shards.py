"""Synthetic, schema-conformant pretraining datasets (for benchmarks and tests), written with numpy/pyarrow only.

Instances look like BERT's (``[CLS] A [SEP] B [SEP]``, ids in a 30,522-token WordPiece range,
15% of positions masked up to 20, ~90% at full length) but are random: the reader never looks at
token meaning. Shards are written exactly as ``schemas`` defines them (Arrow IPC file with the
schema metadata; POSIX tar with one ``<key>.bert`` member per instance), then indexed in a manifest.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bertstream.schemas import id_types, wds
from bertstream.schemas import pretraining as pt
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo, shard_name
from bertstream.schemas.vocab import CLS, MASK, PAD, SEP, UNK, VOCAB_FILENAME, Vocab

FIRST_WORD_ID = 999  # BERT's uncased vocab: ids below are specials, [unused*] and single characters


def bert_like_vocab(size: int = 30522) -> Vocab:
    """BERT layout: [PAD]=0, [unused0..98], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103, then words."""
    tokens = [PAD] + [f"[unused{i}]" for i in range(99)] + [UNK, CLS, SEP, MASK]
    tokens += [f"w{i}" for i in range(size - len(tokens))]
    return Vocab(tuple(tokens))


@dataclass(frozen=True)
class Instances:
    """Columnar, unpadded instances: ragged columns as flat values plus per-row counts."""

    lengths: np.ndarray  # [n] int64
    input_ids: np.ndarray  # [sum lengths]
    segment_a: np.ndarray  # [n] int16
    masked_counts: np.ndarray  # [n] int64
    masked_positions: np.ndarray  # [sum masked_counts] uint16
    masked_ids: np.ndarray  # [sum masked_counts]
    nsp: np.ndarray  # [n] int8
    instance_id: np.ndarray  # [n] uint64

    def __len__(self) -> int:
        return len(self.lengths)

    def slice(self, lo: int, hi: int) -> Instances:
        a, b = _offsets(self.lengths), _offsets(self.masked_counts)
        return Instances(
            self.lengths[lo:hi],
            self.input_ids[a[lo] : a[hi]],
            self.segment_a[lo:hi],
            self.masked_counts[lo:hi],
            self.masked_positions[b[lo] : b[hi]],
            self.masked_ids[b[lo] : b[hi]],
            self.nsp[lo:hi],
            self.instance_id[lo:hi],
        )

    def row(self, i: int) -> dict[str, Any]:
        a, b = _offsets(self.lengths), _offsets(self.masked_counts)
        return {
            "input_ids": self.input_ids[a[i] : a[i + 1]],
            "segment_a_length": int(self.segment_a[i]),
            "masked_lm_positions": self.masked_positions[b[i] : b[i + 1]],
            "masked_lm_ids": self.masked_ids[b[i] : b[i + 1]],
            "next_sentence_label": int(self.nsp[i]),
            "instance_id": int(self.instance_id[i]),
        }

    def by_id(self) -> dict[int, int]:
        return {int(iid): i for i, iid in enumerate(self.instance_id)}


def make_instances(
    n: int,
    *,
    seed: int = 0,
    vocab: Vocab | None = None,
    max_len: int = 128,
    full_fraction: float = 0.9,
    min_len: int = 8,
    max_masked: int = 20,
    masked_fraction: float = 0.15,
    first_id: int = 0,
) -> Instances:
    vocab = vocab or bert_like_vocab()
    special = vocab.special_ids
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n) < full_fraction, max_len, rng.integers(min_len, max_len, n)).astype(np.int64)
    starts = _offsets(lengths)[:-1]
    dtype = np.uint16 if vocab.id_type == "uint16" else np.int32
    ids = rng.integers(FIRST_WORD_ID, len(vocab), int(lengths.sum())).astype(dtype)
    seg_a = rng.integers(2, lengths - 1)  # [CLS] + >=1 token of A + [SEP]
    ids[starts] = special[CLS]
    ids[starts + seg_a - 1] = special[SEP]
    ids[starts + lengths - 1] = special[SEP]
    counts = np.minimum(max_masked, np.maximum(1, np.round(lengths * masked_fraction))).astype(np.int64)
    positions = np.zeros(int(counts.sum()), np.uint16)
    pos_starts = _offsets(counts)[:-1]
    for length in np.unique(lengths):  # one vectorised draw per length
        rows = np.flatnonzero(lengths == length)
        keys = rng.random((len(rows), int(length)))
        keys[:, 0] = 2.0  # never mask [CLS] or a [SEP]
        keys[:, -1] = 2.0
        keys[np.arange(len(rows)), seg_a[rows] - 1] = 2.0
        chosen = np.sort(np.argsort(keys, axis=1)[:, : counts[rows[0]]], axis=1)
        dest = pos_starts[rows][:, None] + np.arange(counts[rows[0]])
        positions[dest.ravel()] = chosen.ravel()
    flat = np.repeat(starts, counts) + positions
    masked_ids = ids[flat].copy()
    roll = rng.random(len(flat))  # BERT's 80/10/10 replacement
    ids[flat[roll < 0.8]] = special[MASK]
    rand = flat[(roll >= 0.8) & (roll < 0.9)]
    ids[rand] = rng.integers(FIRST_WORD_ID, len(vocab), len(rand))
    iid = (np.arange(first_id, first_id + n, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    return Instances(
        lengths, ids, seg_a.astype(np.int16), counts, positions, masked_ids, rng.integers(0, 2, n).astype(np.int8), iid
    )


def write_dataset(
    root: str | Path,
    instances: Instances,
    shard_counts: Sequence[int],
    *,
    vocab: Vocab | None = None,
    formats: Sequence[str] = ("arrow", "webdataset"),
    seed: int = 0,
    rows_per_batch: int = 64,
    prefix: str = "pretrain",
    arrow_stream: bool = False,
    shard_schema_version: int | None = None,
    manifest_schema_version: int | None = None,
    parameters: dict[str, Any] | None = None,
) -> Manifest:
    """Shards of ``shard_counts`` instances each (in order), ``vocab.txt`` and ``manifest.json``."""
    if sum(shard_counts) != len(instances):
        raise ValueError(f"shard counts sum to {sum(shard_counts)}, there are {len(instances)} instances")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    vocab = vocab or bert_like_vocab()
    vocab.write(root / VOCAB_FILENAME)
    parameters = dict(parameters or {"max_seq_length": 128, "max_predictions_per_seq": 20, "seed": seed})
    bounds = np.r_[0, np.cumsum(shard_counts)]
    shards: list[ShardInfo] = []
    for fmt in formats:
        for i, count in enumerate(shard_counts):
            name = shard_name(prefix, i, len(shard_counts), fmt)
            part = instances.slice(int(bounds[i]), int(bounds[i + 1]))
            if fmt == "arrow":
                write_arrow(
                    root / name,
                    part,
                    vocab,
                    parameters,
                    rows_per_batch=rows_per_batch,
                    stream=arrow_stream,
                    schema_version=shard_schema_version,
                )
            else:
                write_tar(root / name, part, vocab)
            data = (root / name).read_bytes()
            shards.append(ShardInfo(name, fmt, count, len(data), hashlib.sha256(data).hexdigest()))
    manifest = Manifest(
        kind=pt.KIND,
        vocab={
            "sha256": vocab.sha256,
            "size": len(vocab),
            "file": VOCAB_FILENAME,
            "lowercase": True,
            "id_type": vocab.id_type,
            "special_ids": vocab.special_ids,
        },
        parameters=parameters,
        seed=seed,
        shards=tuple(shards),
        totals={
            "instances": len(instances),
            "bytes": {f: sum(s.bytes for s in shards if s.format == f) for f in formats},
        },
    )
    if manifest_schema_version is not None:
        manifest = replace(manifest, schema_version=manifest_schema_version)
    (root / MANIFEST_NAME).write_text(manifest.to_json(), encoding="utf-8")
    return manifest


def write_arrow(
    path: Path | pa.NativeFile,
    inst: Instances,
    vocab: Vocab,
    parameters: dict[str, Any],
    *,
    rows_per_batch: int,
    stream: bool = False,
    schema_version: int | None = None,
) -> None:
    schema = pt.arrow_schema(vocab.id_type, vocab.sha256, parameters)
    if schema_version is not None:
        schema = schema.with_metadata({**schema.metadata, b"bertstream.schema_version": str(schema_version).encode()})
    id_type = id_types.arrow_type(vocab.id_type)
    open_writer = pa.ipc.new_stream if stream else pa.ipc.new_file
    sink = path if isinstance(path, pa.NativeFile) else pa.OSFile(str(path), "wb")
    with open_writer(sink, schema) as writer:
        for lo in range(0, len(inst), rows_per_batch):
            part = inst.slice(lo, min(len(inst), lo + rows_per_batch))
            writer.write_batch(
                pa.record_batch(
                    [
                        _list(part.input_ids, part.lengths, id_type),
                        pa.array(part.segment_a, pa.int16()),
                        _list(part.masked_positions, part.masked_counts, pa.uint16()),
                        _list(part.masked_ids, part.masked_counts, id_type),
                        pa.array(part.nsp, pa.int8()),
                        pa.array(part.instance_id, pa.uint64()),
                    ],
                    schema=schema,
                )
            )
    if sink is not path:
        sink.close()


def write_tar(path: Path, inst: Instances, vocab: Vocab) -> None:
    width = id_types.width(vocab.id_type)
    with tarfile.open(path, "w") as tf:
        for i in range(len(inst)):
            r = inst.row(i)
            payload = wds.encode_instance(
                r["input_ids"],
                r["segment_a_length"],
                r["masked_lm_positions"],
                r["masked_lm_ids"],
                r["next_sentence_label"],
                r["instance_id"],
                width,
            )
            info = tarfile.TarInfo(f"{wds.sample_key(r['instance_id'])}.{wds.EXTENSION}")
            info.size, info.mtime, info.mode = len(payload), 0, 0o444
            tf.addfile(info, io.BytesIO(payload))


def _list(values: np.ndarray, counts: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(_offsets(counts).astype(np.int32)), pa.array(values, value_type))


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out
