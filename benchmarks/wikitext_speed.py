"""Wikitext to text: our scanner (pipelines/inputs/wikitext.py) against mwparserfromhell's ``strip_code``
and wikitextparser's ``plain_text``, on the 106 articles of the shared enwiki dump.

Prints, all measured in this one process on one thread (best of ``--runs``, so the ratios compare like with
like): MB/s of wikitext for each, and the ratios; then agreement: word-level F1 of our paragraphs against each
library's text with our prose policy applied (tests/pipelines/inputs/wikitext_reference.py), and the share
of our words that each library's raw text also holds (what it keeps beyond prose is lists, headings, captions,
tables and category names). Also the dump reader's speed (mediawiki.read_pages: bzip2 + XML).

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/wikitext_speed.py [--runs 3]

mwparserfromhell is no dependency of the project: ``pip install mwparserfromhell`` to include it.
"""

from __future__ import annotations

import argparse
import bz2
import os
import time
from collections.abc import Callable
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DUMP = SHARED / "pretrain" / "wikidump" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def best_seconds(fn: Callable[[str], object], texts: list[str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        for text in texts:
            fn(text)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each; the best counts")
    args = ap.parse_args()

    from bertstream.pipelines.inputs.mediawiki_xml import drop_reason, read_pages
    from bertstream.pipelines.inputs.wikitext import wikitext_paragraphs
    from tests.pipelines.inputs import wikitext_reference as R

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t = time.perf_counter()
    pages = list(read_pages(DUMP))
    read_s = time.perf_counter() - t
    xml_mb = len(bz2.decompress(DUMP.read_bytes())) / 1e6
    articles = {p.title: p.text for p in pages if drop_reason(p) is None and p.text}
    texts = list(articles.values())
    mb = sum(len(text.encode()) for text in texts) / 1e6
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared with other jobs)")
    print(f"dump reader: {len(pages)} pages, {xml_mb:.1f} MB of XML in {read_s:.2f} s ({xml_mb / read_s:.1f} MB/s)")
    print(f"{len(texts)} articles, {mb:.2f} MB of wikitext; best of {args.runs} runs, one thread\n")

    methods: dict[str, Callable[[str], object]] = {"ours (wikitext_paragraphs)": wikitext_paragraphs}
    raw: dict[str, Callable[[str], str]] = {}
    oracles: dict[str, Callable[[str], list[str]]] = {}
    try:
        import mwparserfromhell as mwp

        raw["mwparserfromhell strip_code"] = lambda text: mwp.parse(text).strip_code()
        oracles["mwparserfromhell strip_code"] = R.mwparserfromhell_paragraphs
    except ImportError:
        print("mwparserfromhell not installed: left out")
    try:
        import wikitextparser as wtp

        raw["wikitextparser plain_text"] = lambda text: wtp.parse(text).plain_text()
        oracles["wikitextparser plain_text"] = R.wikitextparser_paragraphs
    except ImportError:
        print("wikitextparser not installed: left out")
    methods.update(raw)

    speed = {name: mb / best_seconds(fn, texts, args.runs) for name, fn in methods.items()}
    ours = speed["ours (wikitext_paragraphs)"]
    for name, mbs in speed.items():
        ratio = "" if mbs == ours else f"   ours is {ours / mbs:.1f}x faster"
        print(f"{name:30s} {mbs:6.2f} MB/s{ratio}")

    print()
    paragraphs = {title: wikitext_paragraphs(text) for title, text in articles.items()}
    for name, oracle in oracles.items():
        f1 = {title: R.word_f1(paragraphs[title], oracle(text)) for title, text in articles.items()}
        worst = sorted(f1.items(), key=lambda kv: kv[1])[:3]
        below = sum(v < 0.99 for v in f1.values())
        shown = ", ".join(f"{title} {v:.3f}" for title, v in worst)
        print(
            f"F1 against {name} + our policy: mean {sum(f1.values()) / len(f1):.5f}, {below} below 0.99; worst {shown}"
        )
    for name, fn in raw.items():
        ours_words = R.words([p for title in articles for p in paragraphs[title]])
        theirs = R.words([fn(text) for text in texts])
        kept = sum((ours_words & theirs).values()) / sum(ours_words.values())
        extra = sum(theirs.values()) / sum(ours_words.values()) - 1
        print(f"{name}: holds {kept:.2%} of our words, and {extra:.0%} more words (what is no prose)")


if __name__ == "__main__":
    main()
