"""Dataset directories -> one :class:`Catalog` of usable shards, checked against their manifests.

Everything here runs in the main process of every rank before the step count is fixed, and depends
only on the files, so every rank computes the same catalog (and the same exclusions) on its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bertstream.schemas import pretraining as pt
from bertstream.schemas.manifest import MANIFEST_NAME, Manifest, manifest_source
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import VocabMismatchError
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.data.refs import ShardError, ShardRef, file_size, filesystem, open_input, read_text, sha256_of
from bertstream.trainer.data.shards import check_arrow_header, open_shard

log = logging.getLogger(__name__)
# The flag and the API field, since both the CLI and library users read these messages.
SKIP_HINT = "(pass --skip-corrupt, DataConfig(skip_corrupt=True), to skip corrupt shards)"


@dataclass(frozen=True, slots=True)
class Catalog:
    folders: tuple[str, ...]  # the dataset folders read, in configured order (ShardRef.dataset indexes them)
    shards: tuple[ShardRef, ...]  # usable shards, in configured order
    skipped: tuple[tuple[ShardRef, str], ...]  # (shard, reason) excluded by skip_corrupt
    manifests: tuple[Manifest, ...]
    vocab_sha256: str
    vocab_size: int
    id_type: str
    pad_id: int
    verified: bool  # every usable shard was hashed up front
    fingerprint: str  # identity of the sample index space, for resume checks

    @property
    def num_samples(self) -> int:
        return sum(s.count for s in self.shards)

    @property
    def skipped_samples(self) -> int:
        return sum(s.count for s, _ in self.skipped)


def open_catalog(
    config: DataConfig,
    *,
    expected_vocab_sha256: str | None,
    opened: Mapping[str, Manifest] | None = None,
) -> Catalog:
    """The usable shards of ``config``'s folders, in its format, checked as it asks (``verify``,
    ``skip_corrupt``); ``opened``: manifests the caller has read already, by folder."""
    paths, fmt, skip_corrupt = config.paths, config.format, config.skip_corrupt
    manifests = tuple((opened or {}).get(p) or load_manifest(p) for p in paths)
    lead = _check_vocab(paths, manifests, expected_vocab_sha256)
    _check_distinct(paths, manifests)
    refs: list[ShardRef] = []
    for i, (root, m) in enumerate(zip(paths, manifests)):
        chosen = _choose_format(root, m, fmt)
        longest = m.shard_parameters.max_seq_length
        refs += [ShardRef(root, i, s.path, s.format, s.count, s.bytes, s.sha256, longest) for s in m.shards_of(chosen)]

    bad = dict(_parallel(_size_problem, refs))
    hashed = skip_corrupt and config.verify == "sha256"
    if hashed:
        todo = [r for r in refs if r not in bad]
        bad.update(_parallel(_hash_problem, todo))
    if bad and not skip_corrupt:
        first = next(r for r in refs if r in bad)
        more = f"; {len(bad) - 1} more shard(s) fail too" if len(bad) > 1 else ""
        raise ShardError(f"{first.error(bad[first])}{more} {SKIP_HINT}", path=first.url, sha256=first.sha256)
    usable = tuple(r for r in refs if r not in bad)
    skipped = tuple((r, bad[r]) for r in refs if r in bad)
    for r, why in skipped:
        log.warning("skipping corrupt shard %s (%d instances): %s", r.url, r.count, why)
    if not usable:
        raise ShardError(f"no usable shards in {list(paths)} ({len(skipped)} skipped as corrupt)")
    _check_first_arrow_schema(usable, lead.vocab_sha256, lead.id_type)
    for r in usable:
        if r.count == 0:  # the plan never reads a shard it counts empty: see that it is (a count edited to 0)
            open_shard(r, verify_sha256=False, vocab_sha256=lead.vocab_sha256, id_type=lead.id_type)

    if config.weights is not None:  # a weighted folder is its own dataset: it must hold samples of its own
        _check_each_has_samples(paths, usable)
    ident = [[r.dataset, r.relpath, r.format, r.count, r.sha256] for r in usable]
    fingerprint = hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:16]
    return Catalog(
        folders=tuple(paths),
        shards=usable,
        skipped=skipped,
        manifests=manifests,
        vocab_sha256=lead.vocab_sha256,
        vocab_size=lead.vocab_size,
        id_type=lead.id_type,
        pad_id=lead.pad_id,
        verified=hashed,
        fingerprint=fingerprint,
    )


def _check_each_has_samples(paths: Sequence[str], usable: Sequence[ShardRef]) -> None:
    sizes = [0] * len(paths)
    for s in usable:
        sizes[s.dataset] += s.count
    empty = [p for p, n in zip(paths, sizes) if n == 0]
    if empty:
        raise ShardError(f"no usable shards in weighted --data {', '.join(empty)}")


def load_manifest(root: str) -> Manifest:
    source = manifest_source(root)
    try:
        text = read_text(root, MANIFEST_NAME)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{source}: no manifest; a dataset directory is read through its manifest only"
        ) from None
    m = Manifest.from_json(text, source=source)
    m.require_kind((pt.KIND,), source=source)
    return m


def _check_vocab(paths: Sequence[str], manifests: Sequence[Manifest], expected: str | None) -> Manifest:
    """The first manifest, once every dataset is known to share its vocabulary (and the model's, if given)."""
    first = manifests[0]
    for root, m in zip(paths, manifests):
        if expected is not None and m.vocab_sha256 != expected:
            raise VocabMismatchError(
                f"{root}: tokenised with vocab sha256 {m.vocab_sha256}, the model's vocab is {expected}"
            )
        if m.vocab_sha256 != first.vocab_sha256:
            raise VocabMismatchError(
                f"{root}: vocab sha256 {m.vocab_sha256} differs from {paths[0]}'s {first.vocab_sha256}"
            )
        try:
            pad_id = m.pad_id
        except SchemaError as e:
            raise SchemaError(f"{root}: {e}") from None
        if (pad_id, m.id_type, m.vocab_size) != (first.pad_id, first.id_type, first.vocab_size):
            raise SchemaError(f"{root}: vocab pad id / id type / size differ from {paths[0]}'s")
    return first


def _check_distinct(paths: Sequence[str], manifests: Sequence[Manifest]) -> None:
    """A dataset is its content: a byte copy of one ``--data`` folder given as another (which ``dataset_key``,
    going by resolved path, cannot tell) would be read twice per epoch. Any shard that holds rows and is listed
    by two manifests (same sha256) is refused, naming both folders."""
    owner: dict[str, str] = {}
    for root, m in zip(paths, manifests):
        for s in m.shards:
            if not s.count:  # empty shards of one writer are byte-identical in every dataset
                continue
            other = owner.setdefault(s.sha256, root)
            if other != root:
                raise SchemaError(
                    f"{root}: holds the same shard as {other} ({s.path}, sha256 {s.sha256[:16]}...): the same "
                    "data given twice as --data (a copy of a dataset is the same dataset)"
                )


def _choose_format(root: str, m: Manifest, fmt: str) -> str:
    if fmt == "auto":
        if not m.formats:
            raise SchemaError(f"{root}: manifest lists no shards")
        return "arrow" if "arrow" in m.formats else m.formats[0]
    if fmt not in m.formats:
        raise SchemaError(
            f"{root}: manifest lists no {fmt} shards (it has {m.formats or 'none'}); --format auto reads what each "
            "dataset has"
        )
    return fmt


def _size_problem(ref: ShardRef) -> str | None:
    try:
        size = file_size(ref)
    except FileNotFoundError:
        return "is missing"
    except OSError as e:
        return f"cannot be read ({type(e).__name__}: {e})"
    if size != ref.bytes:
        return f"is {size} bytes, the manifest says {ref.bytes}: truncated or rewritten"
    return None


def _hash_problem(ref: ShardRef) -> str | None:
    try:
        digest = sha256_of(ref)
    except OSError as e:
        return f"cannot be read ({type(e).__name__}: {e})"
    return None if digest == ref.sha256 else f"content hashes to {digest}, not the manifest sha256"


def _parallel(check: Callable[[ShardRef], str | None], refs: Sequence[ShardRef]) -> list[tuple[ShardRef, str]]:
    # Threads: stat/hash/remote calls release the GIL; local stats are too cheap to bother.
    if all(filesystem(r.root)[2] for r in refs) and check is _size_problem:
        results = [check(r) for r in refs]
    else:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(check, refs))
    return [(r, why) for r, why in zip(refs, results) if why is not None]


def _check_first_arrow_schema(refs: Sequence[ShardRef], vocab_sha256: str, id_type: str) -> None:
    """Fail at construction, not inside a worker, when a dataset holds foreign Arrow shards."""
    seen: set[int] = set()
    for r in refs:
        if r.format != "arrow" or r.dataset in seen:
            continue
        seen.add(r.dataset)
        try:
            with open_input(r) as f:
                check_arrow_header(f, r.url, vocab_sha256, id_type)
        except (SchemaError, VocabMismatchError):
            raise
        except OSError as e:
            raise r.error(f"cannot be read ({type(e).__name__}: {e}) {SKIP_HINT}") from None
        except Exception as e:  # a footer that does not parse: corrupt, named with its checksum
            raise r.error(f"does not decode ({type(e).__name__}: {e}) {SKIP_HINT}") from None
