"""``bertprep inspect``: summarise, verify and decode a dataset directory through its manifest."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.source_stats import unk_rate, unk_warning
from bertstream.schemas import pretraining as P
from bertstream.schemas import tasks as T
from bertstream.schemas import wds
from bertstream.schemas.fields import local_member, relative_path
from bertstream.schemas.manifest import DOCUMENTS_KIND, Manifest, ShardInfo
from bertstream.schemas.manifest import load_vocab as load_dataset_vocab
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import Vocab, VocabError, VocabMismatchError


def _read_all(path: str) -> bytes:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return f.read()


class DatasetError(ValueError):
    """A dataset folder lacks a file its manifest promises, or holds a different one."""


def dataset_file(dataset_dir: str, relpath: str) -> str:
    """The path of a file the manifest names: inside ``dataset_dir`` (links resolved on a local disk), or refused."""
    try:
        if "://" in dataset_dir:
            relative_path(relpath, FileSystems.join(dataset_dir, relpath))
            return FileSystems.join(dataset_dir, relpath)
        return local_member(dataset_dir, relpath, FileSystems.join(dataset_dir, relpath))
    except SchemaError as e:
        raise DatasetError(str(e)) from None


def load_vocab(dataset_dir: str, manifest: Manifest) -> Vocab:
    """The dataset's vocabulary, checked against the manifest's hash (the trainer refuses any other)."""
    path = dataset_file(dataset_dir, manifest.vocab_file)
    if not FileSystems.exists(path):
        raise DatasetError(f"{path}: missing (the manifest names it as the dataset's vocabulary)")
    try:
        return load_dataset_vocab(manifest, lambda name: _read_all(dataset_file(dataset_dir, name)), path)
    except VocabMismatchError as e:
        raise DatasetError(f"{e} (a different or edited vocabulary)") from None
    except VocabError as e:
        raise DatasetError(f"{path}: cannot read it as a vocabulary: {e}") from None


@dataclass(frozen=True, slots=True)
class ShardCheck:
    shard: ShardInfo
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_shard(dataset_dir: str, shard: ShardInfo, manifest: Manifest) -> ShardCheck:
    """Re-check size, checksum, schema and row count of one shard against the manifest."""
    problems = []
    try:
        path = dataset_file(dataset_dir, shard.path)
        data = _read_all(path)
    except Exception as e:
        return ShardCheck(shard, (f"cannot read: {e}",))
    if len(data) != shard.bytes:
        problems.append(f"size {len(data)} != manifest {shard.bytes}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != shard.sha256:
        problems.append(f"sha256 {digest[:16]}… != manifest {shard.sha256[:16]}…")
    try:
        count = _count_rows(data, shard.format, manifest)
        if count != shard.count:
            problems.append(f"{count} rows != manifest {shard.count}")
    except Exception as e:
        problems.append(f"cannot decode: {type(e).__name__}: {e}")
    return ShardCheck(shard, tuple(problems))


def _count_rows(data: bytes, fmt: str, manifest: Manifest) -> int:
    if fmt == "arrow":
        reader = pa.ipc.open_file(pa.BufferReader(data))
        if manifest.kind == P.KIND:
            P.check_schema(reader.schema)
            meta = P.read_metadata(reader.schema)
        else:
            T.check_schema(reader.schema, manifest.kind, T.layout_of(manifest.kind, manifest.task))
            meta = T.read_metadata(reader.schema)
        if meta["vocab_sha256"] != manifest.vocab_sha256:
            raise ValueError("schema vocab hash differs from the manifest's")
        table = reader.read_all()
        table.validate(full=True)
        if manifest.kind == P.KIND and table.num_rows:
            ids, positions = table.column(P.INPUT_IDS), table.column(P.MASKED_LM_POSITIONS)
            _check_rows(
                pc.list_value_length(ids).to_numpy(),
                table.column(P.SEGMENT_A_LENGTH).to_numpy(),
                table.column(P.NEXT_SENTENCE_LABEL).to_numpy(),
                pc.list_value_length(positions).to_numpy(),
                table.column(P.INSTANCE_ID).to_numpy(),
                int(pc.max(pc.list_flatten(ids)).as_py() or 0),
                manifest,
            )
        return table.num_rows
    if fmt == "jsonl":  # bertprep extract: one JSON object a line, gzipped or not
        text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        return sum(1 for line in text.splitlines() if json.loads(line))
    rows = [wds.decode_payload(sample[1]) for sample in iter_tar_samples(data)]
    if rows:
        _check_rows(
            np.asarray([len(r[P.INPUT_IDS]) for r in rows], np.int64),
            np.asarray([r[P.SEGMENT_A_LENGTH] for r in rows], np.int64),
            np.asarray([r[P.NEXT_SENTENCE_LABEL] for r in rows], np.int64),
            np.asarray([len(r[P.MASKED_LM_POSITIONS]) for r in rows], np.int64),
            np.asarray([r[P.INSTANCE_ID] for r in rows], np.uint64),
            max(int(np.max(r[P.INPUT_IDS], initial=0)) for r in rows),
            manifest,
        )
    return len(rows)


def _check_rows(
    lengths: Any, segment_a: Any, nsp: Any, masked: Any, instance_ids: Any, top_id: int, manifest: Manifest
) -> None:
    """The trainer's per-shard row checks (:func:`~bertstream.schemas.pretraining.row_problem`) and its id range."""
    bad = P.row_problem(lengths, segment_a, nsp, masked, manifest.shard_parameters.max_seq_length)
    if bad is not None:
        raise ValueError(f"instance {int(instance_ids[bad[0]]):016x} {bad[1]}")
    if top_id >= manifest.vocab_size:
        raise ValueError(f"an id {top_id} outside the vocabulary's 0..{manifest.vocab_size - 1}")


def iter_tar_samples(data: bytes) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None  # a regular file always has contents
                yield member.name, f.read()


# WebDataset samples per record batch when a dataset has no Arrow shards.
WDS_BATCH_ROWS = 1024


def iter_record_batches(dataset_dir: str, manifest: Manifest) -> Iterator[pa.RecordBatch]:
    """Every pretraining row in manifest order, one record batch at a time (Arrow preferred), so memory holds
    one batch, never a shard: ``inspect --decode`` and ``report`` both read shards through this."""
    fmt = "arrow" if manifest.shards_of("arrow") else "webdataset"
    schema = P.arrow_schema(manifest.vocab["id_type"])
    for shard in manifest.shards_of(fmt):
        path = dataset_file(dataset_dir, shard.path)
        if fmt == "arrow":
            try:
                with FileSystems.open(path, compression_type="uncompressed") as f:
                    reader = pa.ipc.open_file(f)
                    for i in range(reader.num_record_batches):
                        batch = reader.get_batch(i)
                        batch.validate(full=True)  # untrusted offsets: never read through them unchecked
                        yield _checked(batch, manifest, path)
            except (pa.ArrowException, OSError) as e:  # truncated, overwritten: name the shard, not just "Arrow"
                raise DatasetError(
                    f"shard {path}: cannot be read ({type(e).__name__}: {e}); bertprep inspect --verify checks "
                    "every shard"
                ) from None
            continue
        rows: list[dict[str, Any]] = []
        for _, payload in iter_tar_samples(_read_all(path)):
            rows.append(wds.decode_payload(payload, source=path))
            if len(rows) == WDS_BATCH_ROWS:
                yield _checked(pa.RecordBatch.from_pylist(rows, schema=schema), manifest, path)
                rows = []
        if rows:
            yield _checked(pa.RecordBatch.from_pylist(rows, schema=schema), manifest, path)


def _checked(batch: pa.RecordBatch, manifest: Manifest, path: str) -> pa.RecordBatch:
    """``batch`` once its rows pass ``--verify``'s checks (:func:`_check_rows`: the row layout, every id inside
    the vocabulary) and its masked positions lie inside their rows: the report counted tokens by id and dropped
    an id past the vocabulary silently (an id of 2**31 - 1 sized its count array by it), and a position past its
    row read the next row's token."""
    if not len(batch):
        return batch
    ids, positions = batch.column(P.INPUT_IDS), batch.column(P.MASKED_LM_POSITIONS)
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False).astype(np.int64)
    k = pc.list_value_length(positions).to_numpy(zero_copy_only=False).astype(np.int64)
    values = (pc.list_flatten(ids), pc.list_flatten(batch.column(P.MASKED_LM_IDS)))
    top = max(int(pc.max(v).as_py() or 0) for v in values)
    low = min(int(pc.min(v).as_py() or 0) for v in values)
    at = pc.list_flatten(positions).to_numpy(zero_copy_only=False).astype(np.int64)
    row_of = np.repeat(np.arange(len(batch)), k)
    outside = np.flatnonzero((at < 0) | (at >= lengths[row_of]))
    try:
        _check_rows(
            lengths,
            batch.column(P.SEGMENT_A_LENGTH).to_numpy(zero_copy_only=False),
            batch.column(P.NEXT_SENTENCE_LABEL).to_numpy(zero_copy_only=False),
            k,
            batch.column(P.INSTANCE_ID).to_numpy(zero_copy_only=False),
            top,
            manifest,
        )
        if low < 0:
            raise ValueError(f"an id {low} outside the vocabulary's 0..{manifest.vocab_size - 1}")
        if len(outside):
            i = int(outside[0])
            raise ValueError(f"a masked position {at[i]} outside its row of {lengths[row_of[i]]} tokens")
    except ValueError as e:
        raise DatasetError(f"shard {path}: {e}; bertprep inspect --verify checks every shard") from None
    return batch


def read_instances(dataset_dir: str, manifest: Manifest, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` instances in manifest order (Arrow preferred)."""
    out: list[dict[str, Any]] = []
    for batch in iter_record_batches(dataset_dir, manifest):
        if len(out) >= limit:
            break
        out.extend(batch.slice(0, limit - len(out)).to_pylist())
    return out


def decode_instance(inst: dict[str, Any], vocab: Vocab) -> str:
    """Text of an instance: masked positions as ``[MASK→orig]``, ``{rand→orig}`` or ``<kept>``."""
    tokens = [vocab.tokens[i] for i in inst["input_ids"]]
    for pos, orig in zip(inst["masked_lm_positions"], inst["masked_lm_ids"]):
        o = vocab.tokens[orig]
        cur = tokens[pos]
        tokens[pos] = f"[MASK→{o}]" if cur == "[MASK]" else (f"<{o}>" if cur == o else f"{{{cur}→{o}}}")
    label = "NotNext" if inst["next_sentence_label"] == P.NOT_NEXT else "IsNext"
    return f"#{inst['instance_id']:016x} {label} A={inst['segment_a_length']} len={len(tokens)}\n  " + " ".join(tokens)


def summary_lines(manifest: Manifest) -> list[str]:
    p, st, c = manifest.shard_parameters, manifest.statistics, manifest.counters
    if manifest.kind == DOCUMENTS_KIND:  # bertprep extract: text, no vocabulary
        drops = C.dropped(c)
        return [
            f"kind {manifest.kind}, schema v{manifest.schema_version}: {len(manifest.shards)} files of JSON lines "
            f"({manifest.totals['bytes'].get('jsonl', 0) / 1e6:.1f} MB)",
            f"documents: {c.get(C.DOCUMENTS_READ, 0)} read, {manifest.totals.get('documents', 0)} written, "
            f"{sum(drops.values())} dropped"
            + (f" ({', '.join(f'{k}: {v}' for k, v in drops.items())})" if drops else ""),
        ]
    lines = [
        f"kind {manifest.kind}, schema v{manifest.schema_version}, vocab {manifest.vocab['size']} tokens "
        f"(sha256 {manifest.vocab['sha256'][:12]}…, {'uncased' if manifest.vocab.get('lowercase') else 'cased'})",
        "shards: "
        + ", ".join(
            f"{len(manifest.shards_of(f))} {f} ({manifest.totals['bytes'].get(f, 0) / 1e6:.1f} MB)"
            for f in manifest.formats
        ),
    ]
    shown = {k: v for k, v in p.recorded().items() if k != "dedup"}
    if shown:
        lines.append("parameters: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    if manifest.kind != P.KIND:
        t = manifest.task
        lines.append(
            f"task: split {t.get('split')}, labels {t.get('labels')}, max_seq_length {t.get('max_seq_length')}"
        )
        lines.append("counters: " + ", ".join(f"{k} {v}" for k, v in c.items() if not isinstance(v, dict)))
        return lines
    if c:
        drops, held = C.dropped(c), c.get(C.DOCUMENTS_HELD_OUT, 0)
        lines.append(
            f"documents: {c.get(C.DOCUMENTS_READ, 0)} read, {c.get(C.DOCUMENTS_USED, 0)} used, "
            + (f"{held} held out for evaluation, " if held else "")
            + f"{sum(drops.values())} dropped"
            + (f" ({C.dropped_text(c)})" if drops else "")
        )
        lines.append(
            f"sentences {c.get('sentences', 0)}, tokens {c.get('tokens', 0)}, instances {manifest.totals.get('instances', 0)}"
        )
        lines.append(f"[UNK]: {c.get('unk_tokens', 0)} of {c.get('tokens', 0)} tokens ({unk_rate(c) * 100:.2f}%)")
        if c.get(C.LONG_SENTENCES) or c.get(C.SENTENCES_CUT):
            lines.append(
                f"truncated: {c.get(C.LONG_SENTENCES, 0)} sentences longer than an instance (at least "
                f"{c.get(C.TOKENS_PAST_MAX_LENGTH, 0)} tokens cut)"
                + (
                    f"; {c[C.SENTENCES_CUT]} sentences cut before tokenizing ({c.get(C.CHARS_CUT, 0)} characters past "
                    "the part an instance could hold)"
                    if c.get(C.SENTENCES_CUT)
                    else ""
                )
            )
        altered = C.altered_text(c)
        if altered:
            lines.append("altered: " + altered)
    if st.get("instances"):
        ln, ns, mf, mp = st["length"], st["next_sentence"], st["mask_fractions"], st["masked_positions_per_instance"]
        lines += [
            f"next sentence: IsNext {ns['is_next']:.3f}, NotNext {ns['not_next']:.3f}",
            f"length: mean {ln['mean']} (std {ln['std']}), p1 {ln['p1']}, p5 {ln['p5']}, p10 {ln['p10']}, "
            f"p50 {ln['p50']}; {ln['fraction_shorter_than_max'] * 100:.1f}% shorter than {p.max_seq_length}",
            f"masked positions per instance: mean {mp['mean']}, count-rule violations {mp['count_rule_violations']}",
            f"predictions: [MASK] {mf['mask']:.3f}, random {mf['random']:.3f}, kept {mf['kept']:.3f}",
        ]
    run = manifest.run
    if run.get("seconds"):
        lines.append(
            f"run: {run.get('runner')}"
            + (f" with {run['worker_processes']} worker processes" if run.get("worker_processes") else "")
            + f", {run['seconds']:.1f} s"
            + (f", {run['input_mb_per_s']:.2f} MB/s of input" if "input_mb_per_s" in run else "")
        )
    return lines


def degenerate_warning(
    counters: dict[str, Any], statistics: dict[str, Any], input_format: Any, max_seq_length: int
) -> str | None:
    """One line when a pretraining dataset's figures say its input was likely read in the wrong layout (it ran,
    exit 0, and would train on garbage): one document, no IsNext pair, or "sentences" longer than a sequence.
    None for a healthy dataset."""
    instances = statistics.get("instances", 0)
    if not instances:
        return None
    documents, sentences = counters.get("documents_used", 0), counters.get("sentences", 0)
    is_next = statistics["next_sentence"]["is_next"]
    per_sentence = counters.get("tokens", 0) / max(sentences, 1)
    seen = []
    if documents <= 1:
        seen.append(f"{documents} document")
    if is_next < 0.02:
        seen.append(f"IsNext {is_next:.3f}")
    if per_sentence > max_seq_length:
        seen.append(f"sentences of {per_sentence:.0f} tokens on average, longer than max_seq_length {max_seq_length}")
    if not seen:
        return None
    if input_format == "sentences" and (is_next < 0.02 or per_sentence > max_seq_length):
        cause = (
            "--format sentences takes each line as one sentence and a blank line as the end of a document: lines "
            "that hold paragraphs are text (--format text), a document per line is --format lines"
        )
    elif documents <= 1:
        cause = (
            f"--format {input_format} found one document; the next-sentence task needs many (text: one a file; "
            "sentences: a blank line between them; or --format lines, jsonl, wikiextractor)"
        )
    else:
        cause = f"the input's layout may not be --format {input_format}'s (see bertprep pretraining --help)"
    return f"warning: degenerate data ({'; '.join(seen)}): {cause}"


def manifest_warning(manifest: Manifest) -> str | None:
    """:func:`degenerate_warning` and :func:`unk_warning` of a pretraining dataset's manifest, one line each."""
    if manifest.kind != P.KIND:
        return None
    p = manifest.parameters
    found = [
        degenerate_warning(
            manifest.counters, manifest.statistics, p.get("input_format"), int(p.get("max_seq_length", 128))
        ),
        unk_warning(manifest.counters, manifest.statistics, manifest.vocab.get("lowercase")),
    ]
    return "\n".join(w for w in found if w) or None
