"""The numbers of ``bertprep report DIR`` (``DIR/report/index.html`` and its PNG plots; :mod:`bertstream.pipelines.report.page` writes it).

Built from the manifest (counters, statistics, per-source figures and ``[UNK]`` words recorded while tokenizing:
see :mod:`bertstream.pipelines.common.source_stats`) and one pass over the shards for the token counts. Memory is bounded: one
record batch at a time and one count per vocabulary entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import source_stats as SS
from bertstream.pipelines.report.inspection import DatasetError, iter_record_batches
from bertstream.schemas import pretraining as P
from bertstream.schemas.manifest import Manifest
from bertstream.schemas.vocab import SPECIAL_TOKENS, UNK, Vocab

REPORT_DIR = "report"
# From the table of drop reasons: those shown even at zero (a zero is news too), and dedup's, counted apart.
DROP_REASONS = tuple(r.name for r in C.DROP_REASONS.values() if r.shown_at_zero and "documents" in r.units)
DUPLICATE_REASONS = tuple(r.name for r in C.DROP_REASONS.values() if r.duplicate)


# A plot grows a bar's height per entry: --top-tokens 1000000 on a 30,000-token dataset drew a 750,000-pixel-tall
# image (3,000 tokens: 28 s and 400 MB); past this no plot or table is read anyway.
MAX_TOP = 1_000


@dataclass(frozen=True, slots=True)
class ReportConfig:
    top_tokens: int = 30
    top_sources: int = 15  # the rest of the sources are shown as one "other" bar
    top_unk_words: int = 25

    def __post_init__(self) -> None:
        for name in ("top_tokens", "top_sources", "top_unk_words"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UsageError(name, f"must be a positive whole number, got {value!r}")
            if value > MAX_TOP:
                raise UsageError(name, f"must be at most {MAX_TOP:,} (one bar or row each), got {value:,}")


@dataclass(slots=True)
class TokenCounts:
    """Counts of every vocabulary id over the instances as they were before masking (each masked position
    counted as its original id), and the instance count: the one pass over the shards."""

    counts: np.ndarray  # [vocab] int64
    instances: int = 0
    not_next: int = 0
    masked: int = 0

    @classmethod
    def empty(cls, vocab_size: int) -> TokenCounts:
        return cls(np.zeros(vocab_size, np.int64))

    def add(self, batch: pa.RecordBatch) -> None:
        ids = batch.column(P.INPUT_IDS)
        positions = batch.column(P.MASKED_LM_POSITIONS)
        offsets = ids.offsets.to_numpy().astype(np.int64)
        flat = ids.values.to_numpy()[offsets[0] : offsets[-1]].astype(np.int64)  # [tokens]
        offsets -= offsets[0]
        k = np.diff(positions.offsets.to_numpy())  # [rows]: predictions per row
        at = offsets[np.repeat(np.arange(len(batch)), k)] + positions.flatten().to_numpy().astype(np.int64)
        flat[at] = batch.column(P.MASKED_LM_IDS).flatten().to_numpy()
        self.counts += np.bincount(flat, minlength=len(self.counts))[: len(self.counts)]
        self.instances += len(batch)
        self.not_next += int(batch.column(P.NEXT_SENTENCE_LABEL).to_numpy().astype(np.int64).sum())
        self.masked += len(at)

    def state_dict(self) -> dict[str, Any]:
        return {
            "counts": self.counts.copy(),
            "instances": self.instances,
            "not_next": self.not_next,
            "masked": self.masked,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = np.asarray(state["counts"], np.int64).copy()
        self.instances = int(state["instances"])
        self.not_next = int(state["not_next"])
        self.masked = int(state["masked"])


def count_tokens(dataset_dir: str, manifest: Manifest, vocab_size: int) -> TokenCounts:
    counts = TokenCounts.empty(vocab_size)
    for batch in iter_record_batches(dataset_dir, manifest):
        counts.add(batch)
    expected = manifest.totals.get("instances", 0)
    if counts.instances != expected:
        raise DatasetError(f"{dataset_dir}: the shards hold {counts.instances} instances, the manifest {expected}")
    return counts


@dataclass(slots=True)
class ReportData:
    """Everything the page shows: key numbers (label, value) and the series behind each plot."""

    title: str
    numbers: list[tuple[str, str]] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    unk_words: list[tuple[str, int]] | None = None  # None: not recorded in the manifest
    removed: list[dict[str, str]] | None = None  # dedup's sample of removed ids; None: dedup not run
    notes: list[str] = field(default_factory=list)


def _top_with_other(rows: dict[str, dict[str, int]], key: str, n: int) -> list[tuple[str, int]]:
    ranked = sorted(rows.items(), key=lambda kv: (-kv[1]["tokens"], kv[0]))
    top = [(name, r[key]) for name, r in ranked[:n]]
    if len(ranked) > n:
        top.append((f"other ({len(ranked) - n} sources)", sum(r[key] for _, r in ranked[n:])))
    return top


REMOVED_SHOWN = 20  # rows of dedup's removed-id sample on the page


def duplicates(manifest: Manifest) -> dict[str, int] | None:
    """Documents removed as duplicates by reason, or None when deduplication did not run."""
    c = manifest.counters
    found = {r: c.get(C.drop(r), c.get(r)) for r in DUPLICATE_REASONS}
    if manifest.shard_parameters.dedup == "none":  # the stage was not in the run (zero counters or none)
        return None
    return {r: int(v or 0) for r, v in found.items()}


def collect(manifest: Manifest, vocab: Vocab, tokens: TokenCounts, cfg: ReportConfig, name: str) -> ReportData:
    c, st, p = manifest.counters, manifest.statistics, manifest.shard_parameters
    data = ReportData(title=f"bertprep report: {name}")
    n = manifest.totals.get("instances", 0)
    drops = C.dropped(c)
    dups = duplicates(manifest)
    for r in DROP_REASONS:
        drops.setdefault(r, 0)
    if dups is not None:
        drops.update(dups)
        data.removed = list(st.get("duplicates", {}).get("removed_sample", []))[:REMOVED_SHOWN]
    ln, ns = st.get("length", {}), st.get("next_sentence", {})
    mp, mf = st.get("masked_positions_per_instance", {}), st.get("mask_fractions", {})
    special = [vocab.id(t) for t in SPECIAL_TOKENS if t in vocab.index and t != UNK]
    words = tokens.counts.copy()
    words[special] = 0  # [CLS], [SEP]: structure, not text
    unk_id = vocab.id(UNK)
    text_tokens = int(words.sum())
    data.numbers += [
        ("instances", f"{n:,}"),
        (
            "documents read / used / dropped" + (" / held out" if c.get(C.DOCUMENTS_HELD_OUT) else ""),
            f"{c.get(C.DOCUMENTS_READ, 0):,} / {c.get(C.DOCUMENTS_USED, 0):,} / {sum(C.dropped(c).values()):,}"
            + (f" / {c[C.DOCUMENTS_HELD_OUT]:,}" if c.get(C.DOCUMENTS_HELD_OUT) else ""),
        ),
        ("sentences / tokens", f"{c.get(C.SENTENCES, 0):,} / {c.get(C.TOKENS, 0):,}"),
        (
            "max_seq_length, dupe_factor, masked_lm_prob",
            f"{p.max_seq_length}, {p.dupe_factor}, {p.masked_lm_prob}",
        ),
        ("vocabulary", f"{len(vocab):,} tokens ({'uncased' if manifest.vocab.get('lowercase') else 'cased'})"),
    ]
    if ln:
        data.numbers.append(
            (
                "instance length",
                f"mean {ln['mean']}, p50 {ln['p50']}, p10 {ln['p10']}; "
                f"{ln['fraction_shorter_than_max'] * 100:.1f}% shorter than {p.max_seq_length}",
            )
        )
    if ns:
        data.numbers.append(("next sentence", f"IsNext {ns['is_next']:.3f}, NotNext {ns['not_next']:.3f}"))
    if mp:
        data.numbers.append(
            (
                "predictions per instance",
                f"mean {mp['mean']}; [MASK] {mf.get('mask', 0):.3f}, "
                f"random {mf.get('random', 0):.3f}, kept {mf.get('kept', 0):.3f}",
            )
        )
    unk_in = SS.UNK_TOKENS in c or any(k.startswith(SS.SOURCE_TOKENS) for k in c)
    data.numbers.append(
        (
            "[UNK] in the input",
            f"{c.get(SS.UNK_TOKENS, 0):,} of {c.get(C.TOKENS, 0):,} tokens "
            f"({c.get(SS.UNK_TOKENS, 0) / max(c.get(C.TOKENS, 0), 1) * 100:.3f}%)"
            if unk_in
            else "not recorded",
        )
    )
    data.numbers.append(
        (
            "[UNK] in the instances",
            f"{int(tokens.counts[unk_id]):,} of {text_tokens:,} text tokens "
            f"({tokens.counts[unk_id] / max(text_tokens, 1) * 100:.3f}%)",
        )
    )
    data.numbers.append(
        ("duplicates removed", "dedup not run" if dups is None else ", ".join(f"{k} {v:,}" for k, v in dups.items()))
    )
    sources = SS.per_source(c)
    if not sources:
        data.notes.append(
            "per-source figures and [UNK] words are not in this manifest (made before they were recorded)"
        )
    data.numbers.append(("input sources", f"{len(sources):,}" if sources else "not recorded"))
    data.series = {
        "length_histogram": st.get("length_histogram", []),
        "max_seq_length": p.max_seq_length,
        "next_sentence": [("IsNext", tokens.instances - tokens.not_next), ("NotNext", tokens.not_next)],
        "predictions_histogram": st.get("predictions_histogram", []),
        "source_documents": _top_with_other(sources, "documents", cfg.top_sources),
        "source_tokens": _top_with_other(sources, "tokens", cfg.top_sources),
        "source_unk_rate": [
            (name, 100.0 * r["unk_tokens"] / max(r["tokens"], 1))
            for name, r in sorted(sources.items(), key=lambda kv: (-kv[1]["tokens"], kv[0]))[: cfg.top_sources]
        ],
        "drops": sorted(drops.items()),
        "top_tokens": [
            (vocab.tokens[i], int(words[i])) for i in np.argsort(-words, kind="stable")[: cfg.top_tokens] if words[i]
        ],
    }
    uw = st.get("unk_words")
    if uw is not None:
        data.unk_words = [(w, int(n)) for w, n in uw["top"][: cfg.top_unk_words]]
        if not uw.get("exact", True):
            data.notes.append(
                f"too many distinct [UNK] words to count them all: the list is the most frequent of a hash-chosen "
                f"{uw['sampled_fraction']:.4g} of them, with exact counts"
            )
    return data
