"""The one schema version shared by every file bertstream writes or reads, and the shard metadata."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bertstream.schemas import json_text

SCHEMA_VERSION = 1
# The readers' version switch: a schema v2 bumps SCHEMA_VERSION (what writers stamp) and adds 1 here only
# while some reader still decodes v1 (then that reader branches on the version check_version returns).
READABLE_VERSIONS: tuple[int, ...] = (SCHEMA_VERSION,)


class SchemaError(ValueError):
    """A shard, sample or manifest does not match the schema this build reads."""


def check_version(
    found: object, *, source: str, what: str = "schema version", readable: tuple[int, ...] | None = None
) -> int:
    """``found`` if this build reads it (``readable``, default :data:`READABLE_VERSIONS`), else a SchemaError
    naming ``source``, the version found and those read. Every reader of a bertstream file calls this."""
    if readable is None:
        readable = READABLE_VERSIONS
    reads = ", ".join(str(v) for v in readable)
    if isinstance(found, bool) or not isinstance(found, int):  # JSON's "1" or true is no version number
        kind = "a string" if isinstance(found, str) else "null" if found is None else f"a {type(found).__name__}"
        raise SchemaError(f"{source}: {what} {found!r} is {kind}, not an integer; this build reads {reads}")
    if found not in readable:
        raise SchemaError(f"{source}: {what} {found}, this build reads {reads}")
    return int(found)


_META_VERSION = b"bertstream.schema_version"
_META_KIND = b"bertstream.kind"
_META_VOCAB = b"bertstream.vocab_sha256"
_META_PARAMS = b"bertstream.parameters"


def encode_metadata(
    kind: str, vocab_sha256: str, parameters: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None
) -> dict[bytes, bytes]:
    """Arrow schema metadata of every bertstream shard: version, kind, vocab hash, parameters (JSON), and
    ``extra`` entries as ``bertstream.<name>`` JSON values."""
    meta = {
        _META_VERSION: str(SCHEMA_VERSION).encode(),
        _META_KIND: kind.encode(),
        _META_VOCAB: vocab_sha256.encode(),
        _META_PARAMS: json.dumps(dict(parameters or {}), sort_keys=True).encode(),
    }
    for name, value in (extra or {}).items():
        meta[f"bertstream.{name}".encode()] = json.dumps(value).encode()
    return meta


def decode_metadata(metadata: Mapping[bytes, bytes] | None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The inverse of :func:`encode_metadata`; ``extra`` maps names to defaults. Raises on a foreign file."""
    meta = metadata or {}
    if _META_VERSION not in meta:
        raise SchemaError("not a bertstream shard: schema metadata lacks bertstream.schema_version")
    try:
        out = {
            "schema_version": int(meta[_META_VERSION]),
            "kind": meta.get(_META_KIND, b"").decode(),
            "vocab_sha256": meta.get(_META_VOCAB, b"").decode(),
            "parameters": json_text.loads(meta.get(_META_PARAMS, b"{}")),
        }
        for name, default in (extra or {}).items():
            raw = meta.get(f"bertstream.{name}".encode())
            out[name] = json_text.loads(raw) if raw is not None else default
    except ValueError as e:  # a version that is no number, a value that is no JSON, bytes that are no UTF-8
        raise SchemaError(f"schema metadata does not decode ({type(e).__name__}: {e})") from None
    if not isinstance(out["parameters"], dict):
        raise SchemaError(f"schema metadata bertstream.parameters is {out['parameters']!r}, not an object")
    return out
