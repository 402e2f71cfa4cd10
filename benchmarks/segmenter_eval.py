"""The segmenters: the sentence segmenter's boundary precision/recall/F1 and speed (default), or the word
segmenters of Chinese whole-word masking (``--words``), in one run.

    python benchmarks/segmenter_eval.py [--data DIR] [--budget SECONDS]
    python benchmarks/segmenter_eval.py --words [--data DIR]

Quality: boundary P/R/F1 per gold source of ``benchmarks/lib/segment_gold.py`` and overall.
Speed: MB/s (UTF-8 bytes of input) on one thread over the shared Wikipedia paragraphs
(``pretrain/wikipedia/wiki_*``: the lines between ``<doc ...>`` and ``</doc>``, less the title line),
per CPU second of this process -- i.e. per core, and not slowed by other jobs queueing for the
cores; the best of up to three full passes, or one partial pass cut at ``--budget`` CPU seconds for
slow tools. The speed of each alternative is also printed as a ratio to ours from the same run.

Compared with ``bertstream.pipelines.pretraining.segmenter`` when importable (the project does not depend on them): blingfire
(``text_to_sentences``), pysbd (English, ``clean=False``) and NLTK Punkt trained unsupervised on the
same Wikipedia text (training time not counted). For speed, each tool's own call is timed; spans are
recovered afterwards for scoring by aligning their sentences on non-whitespace characters.

The choice: the segmenter with the best overall F1 among those with F1 >= 0.98 on every source and
>= 10 MB/s per core.

Words (``--words``): jieba (Python) against rjieba (Rust), on the shared Chinese text: each one's speed over the
shared Chinese files (CLUECorpusSmall, both Wikipedia files), the share of lines both cut into the same words,
and what the Tokenize stage costs with each against no segmenter.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from benchmarks.lib.segment_gold import (  # noqa: E402
    Counts,
    GoldSource,
    all_gold,
    boundary_counts,
    shared_data_dir,
)
from bertstream.pipelines.pretraining.segmenter import sentence_spans  # noqa: E402

MIN_F1 = 0.98
MIN_MB_S = 10.0
_NONSPACE = re.compile(r"\S")

Spans = list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    run: Callable[[str], object]  # the tool's own call, timed for speed
    spans: Callable[[str], Spans]  # character spans, for scoring


def wikipedia_paragraphs(data_dir: Path) -> list[str]:
    """Paragraph lines of the WikiExtractor files, without ``<doc>`` tags, titles or blank lines."""
    paths = sorted((data_dir / "pretrain" / "wikipedia").glob("wiki_*"))
    if not paths:
        raise FileNotFoundError(f"no wiki_* files under {data_dir / 'pretrain' / 'wikipedia'}")
    out: list[str] = []
    for path in paths:
        title_next = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("<doc "):
                title_next = True
            elif line.startswith("</doc>"):
                title_next = False
            elif title_next:
                title_next = False  # the title line repeats the title attribute
            elif line.strip():
                out.append(line)
    return out


def spans_from_sentences(text: str, sentences: Sequence[str]) -> Spans:
    """Map sentence strings of a tool back onto ``text`` by counting non-whitespace characters."""
    nonspace = [m.start() for m in _NONSPACE.finditer(text)]
    spans, i = [], 0
    for s in sentences:
        k = sum(1 for c in s if not c.isspace())
        if k == 0:
            continue
        if i + k > len(nonspace):
            raise ValueError(f"sentences do not align with the paragraph at {text[:60]!r}")
        spans.append((nonspace[i], nonspace[i + k - 1] + 1))
        i += k
    if i != len(nonspace):
        raise ValueError(f"sentences drop {len(nonspace) - i} characters of {text[:60]!r}")
    return spans


def candidates(wiki: list[str]) -> tuple[list[Candidate], list[str]]:
    """Ours plus every importable alternative; also the names of those that are missing."""
    found = [Candidate("ours", sentence_spans, sentence_spans)]
    missing = []
    try:
        import blingfire

        def bf_run(t: str) -> str:
            return blingfire.text_to_sentences(t)

        found.append(Candidate("blingfire", bf_run, lambda t: spans_from_sentences(t, bf_run(t).split("\n"))))
    except ImportError:
        missing.append("blingfire")
    try:
        import pysbd

        seg = pysbd.Segmenter(language="en", clean=False)
        found.append(Candidate("pysbd", seg.segment, lambda t: spans_from_sentences(t, seg.segment(t))))
    except ImportError:
        missing.append("pysbd")
    try:
        from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTrainer

        t0 = time.perf_counter()
        trainer = PunktTrainer()
        trainer.INCLUDE_ALL_COLLOCS = True
        trainer.train("\n".join(wiki), finalize=True)
        punkt = PunktSentenceTokenizer(trainer.get_params())
        took = time.perf_counter() - t0
        print(f"# nltk punkt trained unsupervised on the Wikipedia paragraphs in {took:.1f} s")

        def punkt_spans(t: str) -> Spans:
            return list(punkt.span_tokenize(t))

        found.append(Candidate("nltk-punkt", punkt_spans, punkt_spans))
    except ImportError:
        missing.append("nltk")
    return found, missing


def throughput(run: Callable[[str], object], paragraphs: list[str], budget_s: float) -> tuple[float, int]:
    """(MB per CPU second, bytes measured): best of up to 3 full passes, or one pass cut at
    ``budget_s`` CPU seconds."""
    sizes = [len(p.encode("utf-8")) for p in paragraphs]
    total, best, measured = sum(sizes), 0.0, 0
    for _ in range(3):
        done, t0 = 0, time.process_time()
        for p, size in zip(paragraphs, sizes):
            run(p)
            done += size
            if time.process_time() - t0 > budget_s:
                break
        dt = time.process_time() - t0
        best, measured = max(best, done / dt / 1e6), max(measured, done)
        if done < total:
            break
    return best, measured


CHINESE_FILES = ("CLUECorpusSmall_sampled.txt", "zhwiki/wiki_00", "wiki_zh_2019/wiki_00")


def words(shared: Path) -> None:
    """``--words``: jieba against rjieba, and the Tokenize stage with each."""
    from bertstream.pipelines.inputs.read import read_documents
    from bertstream.pipelines.pretraining.chinese_words import SEGMENTERS, load_segmenter
    from bertstream.pipelines.pretraining.segmenter import split_sentences
    from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
    from bertstream.pipelines.tokenizer.load import load_tokenizer

    lines = [
        line
        for name in CHINESE_FILES
        for line in (shared / "pretrain" / "chinese" / name).read_text(encoding="utf-8").split("\n")
        if line.strip()
    ]
    mb = sum(len(line.encode()) for line in lines) / 1e6
    words = {}
    seconds = {}
    for name in SEGMENTERS:
        t = time.perf_counter()
        spans = load_segmenter(name)
        load = time.perf_counter() - t
        t = time.perf_counter()
        words[name] = [spans(line) for line in lines]
        seconds[name] = time.perf_counter() - t
        print(f"{name:7s} {mb / seconds[name]:6.2f} MB/s over {mb:.2f} MB ({len(lines):,} lines; load {load:.2f} s)")
    same = sum(a == b for a, b in zip(words["rjieba"], words["jieba"])) / len(lines)
    print(f"rjieba / jieba speed: {seconds['jieba'] / seconds['rjieba']:.1f}x; same words on {same:.1%} of lines")

    docs = []
    path = shared / "pretrain" / "chinese" / "CLUECorpusSmall_sampled.txt"
    for d in read_documents(str(path), "sentences", Counter()):
        docs += [(f"{i}", split_sentences(line)) for i, line in enumerate(d.paragraphs)]
    spec = load_tokenizer(str(shared / "vocab" / "bert-base-chinese-vocab.txt"))
    mb = path.stat().st_size / 1e6
    base = None
    for name in ("", *SEGMENTERS):
        tok = DocumentTokenizer(spec, name)
        t = time.perf_counter()
        tok(docs, Counter())
        dt = time.perf_counter() - t
        base = base or dt
        print(f"Tokenize {name or 'no segmenter':12s} {mb / dt:6.2f} MB/s ({dt / base:.1f}x the time without one)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=shared_data_dir(), help="shared data dir")
    ap.add_argument("--budget", type=float, default=30.0, help="CPU seconds per speed pass")
    ap.add_argument("--words", action="store_true", help="the Chinese word segmenters (jieba, rjieba) instead")
    args = ap.parse_args(argv)
    if args.words:
        words(args.data)
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, for any tool that would thread

    gold: list[GoldSource] = all_gold(args.data)
    wiki = wikipedia_paragraphs(args.data)
    wiki_mb = sum(len(p.encode("utf-8")) for p in wiki) / 1e6
    print("# gold sources (eligibility rules E1-E3 in benchmarks/lib/segment_gold.py)")
    for g in gold:
        print(
            f"#   {g.name:12s} sentences {g.total:6d}  removed {sum(g.removed.values()):5d} "
            f"{dict(sorted(g.removed.items()))}  paragraphs {len(g.paragraphs):5d}  "
            f"boundaries {g.boundaries:6d}"
        )
    print(f"# speed input: {len(wiki)} Wikipedia paragraphs, {wiki_mb:.1f} MB, one thread, MB per CPU second")
    found, missing = candidates(wiki)
    if missing:
        print(f"# not importable, not measured: {', '.join(missing)}")

    print()
    print(
        f"{'segmenter':12s} {'source':12s} {'gold':>6s} {'tp':>6s} {'fp':>5s} {'fn':>5s} "
        f"{'P':>7s} {'R':>7s} {'F1':>7s} {'MB/s':>7s}"
    )
    results = []
    for c in found:
        per_source = {g.name: boundary_counts(c.spans, g.paragraphs) for g in gold}
        overall = sum(per_source.values(), Counts())
        mb_s, measured = throughput(c.run, wiki, args.budget)
        for name, k in [*per_source.items(), ("overall", overall)]:
            speed = f"{mb_s:7.2f}" if name == "overall" else ""
            print(
                f"{c.name:12s} {name:12s} {k.tp + k.fn:6d} {k.tp:6d} {k.fp:5d} {k.fn:5d} "
                f"{k.precision:7.4f} {k.recall:7.4f} {k.f1:7.4f} {speed:>7s}"
            )
        if measured < wiki_mb * 1e6:
            cut = f"pass cut at {args.budget:.0f} CPU s"
            print(f"{'':12s} (speed from the first {measured / 1e6:.2f} MB: {cut})")
        worst = min(k.f1 for k in per_source.values())
        results.append((c.name, overall.f1, worst, mb_s))

    print()
    ours_mb_s = results[0][3]
    for name, _, _, mb_s in results[1:]:
        print(f"speed ratio ours / {name}: {ours_mb_s / mb_s:.1f}x")
    ok = [r for r in results if r[2] >= MIN_F1 and r[3] >= MIN_MB_S]
    if not ok:
        print(f"choice: none -- no segmenter reaches F1 >= {MIN_F1} on every source at >= {MIN_MB_S} MB/s")
        return 1
    name, f1, worst, mb_s = max(ok, key=lambda r: (r[1], r[3]))
    print(f"choice: {name} (overall F1 {f1:.4f}, worst source F1 {worst:.4f}, {mb_s:.1f} MB/s per core)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
