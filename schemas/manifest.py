"""``DIR/manifest.json``: the index of a dataset directory. Readers trust it, never a glob.

Layout (version 1)::

    {
      "format": "bertstream.manifest",
      "schema_version": 1,
      "kind": "pretraining" | "documents" | a task kind's name ("classification", "ner", ...),
      "vocab": {"sha256": ..., "size": ..., "file": "vocab.txt", "lowercase": bool,
                "id_type": "uint16" | "int32", "special_ids": {"[PAD]": 0, ...}},
      "parameters": {...},            # every parameter that shaped the rows (seed included)
      "seed": int,
      "inputs": [{"path": ..., "bytes": ...}, ...],
      "shards": [{"path": "pretrain-00000-of-00004.arrow", "format": "arrow" | "webdataset" | "jsonl",
                  "count": int, "bytes": int, "sha256": hex}, ...],   # paths relative to DIR
      "totals": {"instances": int, "bytes": {"arrow": int, ...}},
      "counters": {...},              # documents read/used/dropped by reason, sentences, tokens, ...
      "statistics": {...},            # NSP fractions, length histogram, masking fractions, ...
      "task": {...},                  # task datasets: "layout" (schemas.tasks.LAYOUTS), label names, ids, ...
      "run": {...}                    # runner, options, wall time: informational only
    }

A ``documents`` dataset (``bertprep extract``: the text as read, before segmentation) has ``jsonl`` shards
(``documents-00000-of-00004.jsonl.gz`` or ``.jsonl``, one ``{"id", "title", "text"}`` object a line, ``count``
their lines) and no vocabulary: its ``vocab`` is ``{}``.

``run`` (informational: readers never depend on it) holds ``runner``, ``options``, ``started_at``, ``run_id``,
``seconds``, ``input_mb_per_s`` and, since the fast tokenizer backend, ``tokenizer``: ``{"backend": "nanotoken" |
"tokenizers", "version": ...}``, the library the run chose to encode the text (both give the same ids; older
manifests lack it), with ``fallback_documents``: how many documents workers without nanotoken encoded with
``tokenizers`` instead (absent when none).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from bertstream.schemas import json_text
from bertstream.schemas.manifest_check import DOCUMENTS_KIND, SHARD_FORMATS, check_manifest
from bertstream.schemas.version import SCHEMA_VERSION, SchemaError, check_version
from bertstream.schemas.vocab import PAD, VOCAB_FILENAME, Vocab, VocabError, VocabMismatchError

MANIFEST_NAME = "manifest.json"
FORMAT = "bertstream.manifest"
SHARD_EXTENSIONS = {"arrow": "arrow", "webdataset": "tar", "jsonl": "jsonl"}


def manifest_source(root: str) -> str:
    """How messages name a dataset folder's manifest (``root`` is a local path or a URL)."""
    return root.rstrip("/") + "/" + MANIFEST_NAME


def vocab_entry(vocab: Vocab, *, lowercase: bool, source: str | None = None) -> dict[str, Any]:
    """The manifest's ``vocab`` object for a dataset tokenised with ``vocab``."""
    entry: dict[str, Any] = {
        "sha256": vocab.sha256,
        "size": len(vocab),
        "file": VOCAB_FILENAME,
        "lowercase": lowercase,
        "id_type": vocab.id_type,
        "special_ids": vocab.special_ids,
    }
    if source is not None:
        entry["source"] = source
    return entry


def load_vocab(manifest: Manifest, read: Callable[[str], bytes], source: str) -> Vocab:
    """The dataset's vocabulary, checked against its manifest's hash: the one loader every reader uses.

    ``read(name)`` returns the bytes of the file ``name`` (relative to the dataset folder: the manifest's
    ``vocab.file``) from wherever the dataset lies; ``source`` names that file in messages. Raises
    :class:`VocabError` for a file that is no vocabulary, :class:`VocabMismatchError` for another vocabulary
    than the manifest's (the readers refuse any other: the ids would mean other tokens).
    """
    raw = read(manifest.vocab_file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VocabError(f"{source}: not UTF-8 ({e})") from None
    vocab = Vocab.from_text(text, source)
    if vocab.sha256 != manifest.vocab_sha256:
        raise VocabMismatchError(f"{source} hashes to {vocab.sha256}, the manifest says {manifest.vocab_sha256}")
    # The hash fixes the tokens; the manifest's size and special ids (which the readers' id range checks and
    # padding use) must then be the vocabulary's own.
    if len(vocab) != manifest.vocab_size or vocab.special_ids != manifest.vocab["special_ids"]:
        raise VocabMismatchError(
            f"{source}: {len(vocab)} tokens with special ids {vocab.special_ids}, the manifest says vocab.size "
            f"{manifest.vocab_size} and {manifest.vocab['special_ids']}"
        )
    return vocab


def shard_name(prefix: str, index: int, num_shards: int, fmt: str) -> str:
    """Predictable shard names: ``prefix-00003-of-00008.arrow``."""
    return f"{prefix}-{index:05d}-of-{num_shards:05d}.{SHARD_EXTENSIONS[fmt]}"


@dataclass(frozen=True, slots=True)
class ShardInfo:
    path: str
    format: str
    count: int
    bytes: int
    sha256: str

    def __post_init__(self) -> None:
        if self.format not in SHARD_FORMATS:
            raise SchemaError(f"shard {self.path}: format {self.format!r} not in {SHARD_FORMATS}")
        if self.count < 0 or self.bytes < 0:
            raise SchemaError(f"shard {self.path}: negative count or size")
        if len(self.sha256) != 64:
            raise SchemaError(f"shard {self.path}: sha256 {self.sha256!r} is not 64 hex digits")
        # Readers join the path to the dataset folder: it must stay inside it (no /abs, C:\\, URL or ..).
        parts = self.path.replace("\\", "/").split("/")
        if not self.path or self.path.startswith(("/", "\\")) or ":" in self.path or ".." in parts:
            raise SchemaError(f"shard {self.path!r}: path leaves the dataset folder (must be relative, without '..')")


@dataclass(frozen=True, slots=True)
class ShardParameters:
    """The typed view of the parameters that shaped a dataset's rows (``manifest.parameters``, also each
    shard's ``bertstream.parameters``) for the readers: no reader spells a key. A field is None where the run
    did not record it (task datasets record other parameters; older runs fewer); ``dedup`` defaults to
    ``"none"``, as runs without deduplication leave it out."""

    max_seq_length: int | None = None
    max_predictions_per_seq: int | None = None
    masked_lm_prob: float | None = None
    short_seq_prob: float | None = None
    dupe_factor: int | None = None
    seed: int | None = None
    whole_word_mask: bool | None = None
    dedup: str = "none"

    @classmethod
    def from_dict(cls, parameters: Mapping[str, Any]) -> ShardParameters:
        return cls(**{f.name: parameters[f.name] for f in fields(cls) if parameters.get(f.name) is not None})

    def recorded(self) -> dict[str, Any]:
        """The fields the run recorded, in declaration order (``dedup`` only where deduplication ran)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        if self.dedup == "none":
            del out["dedup"]
        return out


@dataclass(frozen=True, slots=True)
class Manifest:
    kind: str
    vocab: dict[str, Any]
    parameters: dict[str, Any]
    seed: int
    shards: tuple[ShardInfo, ...]
    inputs: tuple[dict[str, Any], ...] = ()
    totals: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    statistics: dict[str, Any] = field(default_factory=dict)
    task: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.kind == DOCUMENTS_KIND:  # text before tokenization: no vocabulary to describe
            return
        for key in ("sha256", "size", "id_type", "special_ids"):
            if key not in self.vocab:
                raise SchemaError(f"manifest vocab lacks {key!r}")

    @property
    def shard_parameters(self) -> ShardParameters:
        """``parameters``, typed (what readers use)."""
        return ShardParameters.from_dict(self.parameters)

    @property
    def vocab_sha256(self) -> str:
        return self.vocab["sha256"]

    @property
    def vocab_size(self) -> int:
        return int(self.vocab["size"])

    @property
    def id_type(self) -> str:
        return self.vocab["id_type"]

    @property
    def vocab_file(self) -> str:
        """The vocabulary's path relative to the dataset folder."""
        return self.vocab.get("file", VOCAB_FILENAME)

    @property
    def lowercase(self) -> bool:
        """Whether the vocabulary's text was lower-cased (BERT's uncased models); older manifests: True."""
        return bool(self.vocab.get("lowercase", True))

    @property
    def pad_id(self) -> int:
        special = self.vocab["special_ids"]
        if PAD not in special:
            raise SchemaError(f"manifest vocab.special_ids lacks {PAD}")
        return int(special[PAD])

    def require_kind(self, kinds: Sequence[str], *, source: str, expected: str | None = None) -> None:
        """SchemaError naming ``source`` unless the dataset holds one of ``kinds`` (``expected`` describes them)."""
        if self.kind not in kinds:
            raise SchemaError(f"{source}: a {self.kind!r} dataset, not {expected or repr(kinds[0])}")

    def shards_of(self, fmt: str) -> list[ShardInfo]:
        return [s for s in self.shards if s.format == fmt]

    @property
    def formats(self) -> list[str]:
        return [f for f in SHARD_FORMATS if self.shards_of(f)]

    def to_json(self) -> str:
        d = asdict(self)
        out = {"format": FORMAT, "schema_version": d.pop("schema_version")}
        out.update(d)
        return json.dumps(out, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = MANIFEST_NAME) -> Manifest:
        try:
            d = json_text.loads(text)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{source}: malformed JSON ({e})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise SchemaError(f"{source}: not a bertstream manifest (format != {FORMAT!r})")
        version = check_version(d.get("schema_version"), source=source)
        try:
            check_manifest(d)
        except SchemaError as e:
            raise SchemaError(f"{source}: field {e}") from None
        try:
            shards = tuple(ShardInfo(**s) for s in d["shards"])
            return cls(
                kind=d["kind"],
                vocab=d["vocab"],
                parameters=d["parameters"],
                seed=d["seed"],
                shards=shards,
                inputs=tuple(d.get("inputs", ())),
                totals=d.get("totals", {}),
                counters=d.get("counters", {}),
                statistics=d.get("statistics", {}),
                task=d.get("task", {}),
                run=d.get("run", {}),
                schema_version=version,
            )
        except (KeyError, TypeError) as e:
            raise SchemaError(f"{source}: missing or malformed field ({e})") from None
