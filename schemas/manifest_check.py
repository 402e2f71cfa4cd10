"""Every field of a manifest, type- and range-checked before any reader uses it (``Manifest.from_json`` calls
:func:`check_manifest`): a manifest is untrusted input, like the shards it lists.

Besides each field's type and range, the fields must agree with each other: the id type holds the vocabulary
size, the special ids lie inside it and are distinct, no shard is listed twice (by path or by content: a shard
read twice per epoch would be a silent bias), each format holds the same rows, and the totals are the sum of
the shards' counts. One line names the first field that fails (``vocab.size``, ``shards[3].count``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertstream.schemas import fields as F
from bertstream.schemas import pretraining as P
from bertstream.schemas import tasks as T
from bertstream.schemas.id_types import MAX_UINT16_VOCAB, id_type_for
from bertstream.schemas.manifest_stats import MAX_LENGTH, check_statistics
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import SPECIAL_TOKENS

DOCUMENTS_KIND = "documents"  # bertprep extract: text before tokenization, no vocabulary
SHARD_FORMATS = ("arrow", "webdataset", "jsonl")
MAX_VOCAB = (1 << 31) - 1  # int32 ids
MAX_SEQ_LENGTH = MAX_LENGTH
MAX_SEED = (1 << 63) - 1
SHARD_KEYS = ("path", "format", "count", "bytes", "sha256")


def check_parameters(parameters: Mapping[str, Any], prefix: str = "parameters.") -> None:
    """The parameters readers use (``ShardParameters``), where present: the manifest's and each shard's."""
    p = parameters
    if p.get("max_seq_length") is not None:
        F.integer(p["max_seq_length"], prefix + "max_seq_length", 3, MAX_SEQ_LENGTH)
    if p.get("max_predictions_per_seq") is not None:
        F.integer(p["max_predictions_per_seq"], prefix + "max_predictions_per_seq", 0, MAX_SEQ_LENGTH)
    for name in ("masked_lm_prob", "short_seq_prob"):
        if p.get(name) is not None:
            F.number(p[name], prefix + name, 0.0, 1.0)
    if p.get("dupe_factor") is not None:
        F.integer(p["dupe_factor"], prefix + "dupe_factor", 1, 1 << 20)
    if p.get("seed") is not None:
        F.integer(p["seed"], prefix + "seed", 0, MAX_SEED)
    if p.get("whole_word_mask") is not None:
        F.boolean(p["whole_word_mask"], prefix + "whole_word_mask")
    if p.get("dedup") is not None:
        F.string(p["dedup"], prefix + "dedup")


def _check_vocab(vocab: Any) -> None:
    v = F.mapping(vocab, "vocab")
    F.sha256_hex(F.member(v, "sha256", "vocab."), "vocab.sha256")
    size = F.integer(F.member(v, "size", "vocab."), "vocab.size", len(SPECIAL_TOKENS), MAX_VOCAB)
    id_type = F.string(F.member(v, "id_type", "vocab."), "vocab.id_type", ("uint16", "int32"))
    if id_type != id_type_for(size):
        raise SchemaError(
            f"vocab.id_type: {id_type} does not match vocab.size {size} (uint16 up to {MAX_UINT16_VOCAB}, then int32)"
        )
    if "file" in v:
        F.relative_path(v["file"], "vocab.file")
    if "lowercase" in v:
        F.boolean(v["lowercase"], "vocab.lowercase")
    if "source" in v:
        F.string(v["source"], "vocab.source")
    special = F.mapping(F.member(v, "special_ids", "vocab."), "vocab.special_ids")
    ids = [
        F.integer(F.member(special, t, "vocab.special_ids."), f"vocab.special_ids.{t}", 0, size - 1)
        for t in SPECIAL_TOKENS
    ]
    if len(set(ids)) != len(ids):
        raise SchemaError(f"vocab.special_ids: two special tokens share an id ({special})")


def _check_shards(shards: Any) -> dict[str, int]:
    """Rows per format."""
    rows: dict[str, int] = {}
    seen: dict[tuple[str, str], int] = {}
    for i, s in enumerate(F.array(shards, "shards")):
        name = f"shards[{i}]"
        F.mapping(s, name)
        extra = sorted(set(s) - set(SHARD_KEYS))
        if extra:
            raise SchemaError(f"{name}: unknown field {extra[0]!r}")
        path = F.relative_path(F.member(s, "path", name + "."), name + ".path")
        fmt = F.string(F.member(s, "format", name + "."), name + ".format", SHARD_FORMATS)
        size = F.integer(F.member(s, "bytes", name + "."), name + ".bytes", 0, F.MAX_BYTES)
        # Every row takes at least a byte: a count past the file's size is no count of its rows (gzipped JSON
        # lines of repeated text can take less).
        most = F.MAX_COUNT if fmt == "jsonl" else min(size, F.MAX_COUNT)
        count = F.integer(F.member(s, "count", name + "."), name + ".count", 0, most)
        digest = F.sha256_hex(F.member(s, "sha256", name + "."), name + ".sha256")
        # Empty shards of one writer are byte-identical: only shards that hold rows are told apart by digest.
        for key in (("path", path), ("sha256", digest)) if count else (("path", path),):
            if key in seen:
                raise SchemaError(f"{name}: the same shard as shards[{seen[key]}] (same {key[0]}): listed twice")
            seen[key] = i
        rows[fmt] = rows.get(fmt, 0) + count
    return rows


def _check_task(task: Any) -> None:
    t = F.mapping(task, "task")
    if "labels" in t:
        labels = F.array(t["labels"], "task.labels")
        for i, label in enumerate(labels):
            F.string(label, f"task.labels[{i}]")
        if len(set(labels)) != len(labels):
            raise SchemaError("task.labels: a label is listed twice")
    if "layout" in t:
        F.string(t["layout"], "task.layout", tuple(T.LAYOUTS))
    if "labeled" in t:
        F.boolean(t["labeled"], "task.labeled")
    if t.get("max_seq_length") is not None:
        F.integer(t["max_seq_length"], "task.max_seq_length", 3, MAX_SEQ_LENGTH)
    for name in ("glue", "split"):
        if t.get(name) is not None:
            F.string(t[name], f"task.{name}")
    for i, f in enumerate(F.array(t.get("files", []), "task.files")):
        name = f"task.files[{i}]"
        F.mapping(f, name)
        F.relative_path(F.member(f, "path", name + "."), name + ".path")
        F.sha256_hex(F.member(f, "sha256", name + "."), name + ".sha256")
        F.integer(F.member(f, "count", name + "."), name + ".count", 0, F.MAX_COUNT)
        F.string(F.member(f, "role", name + "."), name + ".role")


def check_manifest(d: Mapping[str, Any]) -> None:
    """SchemaError naming the first field of the parsed manifest ``d`` that is missing, mistyped, out of range
    or inconsistent with the others (the caller prefixes the manifest's name)."""
    kind = F.string(F.member(d, "kind"), "kind")
    if kind not in (P.KIND, DOCUMENTS_KIND):  # a task dataset: a kind's name, rows of a layout of the contract
        T.check_kind_name(kind)
        T.layout_of(kind, F.mapping(d.get("task", {}), "task"), source="kind")
    if kind != DOCUMENTS_KIND or d.get("vocab"):
        _check_vocab(d.get("vocab"))
    parameters = F.mapping(F.member(d, "parameters"), "parameters")
    check_parameters(parameters)
    F.integer(F.member(d, "seed"), "seed", 0, MAX_SEED)
    rows = _check_shards(F.member(d, "shards"))
    if len(set(rows.values())) > 1:
        raise SchemaError(f"shards: the formats hold different numbers of rows ({rows})")
    for i, entry in enumerate(F.array(d.get("inputs", []), "inputs")):
        F.mapping(entry, f"inputs[{i}]")
    for name in ("totals", "counters", "statistics", "run"):
        F.mapping(d.get(name, {}), name)
    _check_task(d.get("task", {}))
    task_length = d.get("task", {}).get("max_seq_length")
    check_statistics(
        d.get("statistics", {}),
        parameters.get("max_seq_length", task_length),
        parameters.get("max_predictions_per_seq"),
    )
    totals = d.get("totals", {})
    total_key = {P.KIND: "instances", DOCUMENTS_KIND: "documents"}.get(kind, "rows")
    if total_key in totals:
        total = F.integer(totals[total_key], f"totals.{total_key}", 0, F.MAX_COUNT)
        held = next(iter(rows.values()), 0)
        if total != held:
            raise SchemaError(f"totals.{total_key}: {total}, but the shards' counts add up to {held}")
