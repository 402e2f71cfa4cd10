"""The whole pipeline from a MediaWiki dump against the same articles as JSON lines, and peak memory in the dump's
size: one run, every figure a ratio of two measured in it (the machine may be shared: it says its load).

1. The read stage alone on the shared enwiki dump (``read_documents``), and its parts: bzip2 decompression, XML
   to pages, wikitext to text.
2. ``bertprep pretraining`` from the dump (``mediawiki:``) and from the JSON lines of its articles (written by
   ``bertprep extract`` from that dump: the same documents), each on the dump and on a dump four times its size
   (its pages four times, page ids renumbered, one bzip2 stream as Wikimedia's non-multistream files),
   alternately, ``--runs`` times each, the best counted. A run's fixed cost (start, Beam) cancels in x4 - x1:
   extraction's share of the time the text costs is ``1 - jsonl / dump`` there.
3. Peak resident memory (``ru_maxrss`` of the command's process; Beam's in-process runner) of ``bertprep extract``
   and ``bertprep pretraining`` on x1 and x4, and the ratios.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/wikipedia_pipeline.py [--runs 2] [--dupe-factor 10]

Wikitext to text (``--wikitext``): our scanner (pipelines/pretraining/wikitext.py) against mwparserfromhell's
``strip_code`` and wikitextparser's ``plain_text``, on the 106 articles of the shared enwiki dump. Prints, all
measured in this one process on one thread (best of ``--runs``, 3 by default, so the ratios compare like with
like): MB/s of wikitext for each, and the ratios; then agreement: word-level F1 of our paragraphs against each
library's text with our prose policy applied (tests/pipelines/pretraining/wikitext_reference.py), and the share
of our words that each library's raw text also holds (what it keeps beyond prose is lists, headings, captions,
tables and category names). Also the dump reader's speed (mediawiki.read_pages: bzip2 + XML).
mwparserfromhell is no dependency of the project: ``pip install mwparserfromhell`` to include it.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/wikipedia_pipeline.py --wikitext [--runs 3]
"""

from __future__ import annotations

import argparse
import bz2
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.lib.timing import timed  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DUMP = SHARED / "pretrain" / "wikidump" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
_PAGE_ID = re.compile(rb"(<ns>-?\d+</ns>\s*<id>)(\d+)(</id>)")


def bertprep(*args: str) -> tuple[float, int]:
    """Run ``bertprep ARGS`` in a child process: its wall seconds and peak RSS in bytes."""
    code = "from bertstream.pipelines.cli import main; main()"
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    output = proc.stdout.read().decode() if proc.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bertprep {' '.join(args)} failed:\n{output}")
    return seconds, usage.ru_maxrss * 1024  # KiB on Linux


def repeated_dump(xml: bytes, copies: int, first: int = 0) -> bytes:
    """The dump's pages ``copies`` times in one export, page ids renumbered so that each stays unique (copy k
    adds k x 10,000,000; copies ``first`` to ``first + copies - 1``, so that separate files stay distinct too)."""
    head, sep, rest = xml.partition(b"  <page>")
    body, end, tail = rest.rpartition(b"</mediawiki>")
    pages = sep + body
    parts = [head]
    for k in range(first, first + copies):
        parts.append(_PAGE_ID.sub(lambda m, k=k: m[1] + str(int(m[2]) + k * 10_000_000).encode() + m[3], pages))
    parts.append(end + tail)
    return b"".join(parts)


def read_breakdown(runs: int) -> tuple[float, float]:
    """Print where the read stage's time goes on the dump (one thread, best of ``runs``); its MB of XML, text."""
    from bertstream.pipelines.inputs.mediawiki_xml import drop_reason, read_pages
    from bertstream.pipelines.inputs.read import read_documents
    from bertstream.pipelines.inputs.wikitext import wikitext_paragraphs

    raw = DUMP.read_bytes()
    xml = bz2.decompress(raw)
    pages = [p for p in read_pages(io.BytesIO(xml), name="dump") if drop_reason(p) is None and p.text]
    docs = list(read_documents(str(DUMP), "mediawiki", Counter()))
    xml_mb = len(xml) / 1e6
    text_mb = sum(len(p.encode()) + 1 for d in docs for p in d.paragraphs) / 1e6
    parts = {
        "bzip2 decompression": timed(lambda: bz2.decompress(raw), runs),
        "XML to pages": timed(lambda: list(read_pages(io.BytesIO(xml), name="dump")), runs),
        "wikitext to text": timed(lambda: [wikitext_paragraphs(p.text) for p in pages], runs),
    }
    whole = timed(lambda: list(read_documents(str(DUMP), "mediawiki", Counter())), runs)
    print(
        f"read stage (one thread, best of {runs}): {whole:.2f} s for {len(raw) / 1e6:.1f} MB of bz2, {xml_mb:.1f} MB "
        f"of XML -> {text_mb:.1f} MB of text ({xml_mb / whole:.1f} MB/s of XML, {len(raw) / 1e6 / whole:.2f} MB/s of bz2)"
    )
    for name, seconds in parts.items():
        print(f"  {name:20s} {seconds:5.2f} s  {seconds / whole:4.0%}  {xml_mb / seconds:5.1f} MB/s of XML")
    return xml_mb, text_mb


def read_seconds(copies: int) -> float:
    """The read stage on the dump, ``copies`` times, best of 3."""
    from bertstream.pipelines.inputs.read import read_documents

    return copies * timed(lambda: list(read_documents(str(DUMP), "mediawiki", Counter())), 3)


def wikitext(runs: int) -> None:
    """``--wikitext``: our wikitext scanner against two parsers' plain text, speed and agreement."""

    from bertstream.pipelines.inputs.mediawiki_xml import drop_reason, read_pages
    from bertstream.pipelines.inputs.wikitext import wikitext_paragraphs
    from tests.pipelines.pretraining import wikitext_reference as R

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
    print(f"{len(texts)} articles, {mb:.2f} MB of wikitext; best of {runs} runs, one thread\n")

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

    speed = {name: mb / timed(lambda fn=fn: [fn(text) for text in texts], runs) for name, fn in methods.items()}
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, help="timed runs of each; the best counts (default 2; --wikitext 3)")
    ap.add_argument("--dupe-factor", type=int, default=10, help="BERT's default is 10")
    ap.add_argument("--wikitext", action="store_true", help="wikitext to text: our scanner against two parsers")
    args = ap.parse_args()
    if args.wikitext:
        return wikitext(args.runs or 3)
    args.runs = args.runs or 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    with tempfile.TemporaryDirectory(prefix="wikipedia-bench-") as tmp:
        work = Path(tmp)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared with other jobs)")
        xml_mb, text_mb = read_breakdown(max(args.runs, 3))

        big = work / "enwiki-4x.xml.bz2"
        big.write_bytes(bz2.compress(repeated_dump(bz2.decompress(DUMP.read_bytes()), 4), 9))
        vocab = work / "vocab"
        bertprep("vocab", "--input", f"mediawiki:{DUMP}", "--output", str(vocab), "--vocab-size", "8000")
        dumps = {1: DUMP, 4: big}
        rss: dict[str, int] = {}
        inputs: dict[str, list[str]] = {}
        for copies, path in dumps.items():
            s, rss[f"extract x{copies}"] = bertprep(
                "extract", "--input", f"mediawiki:{path}", "--output", str(work / f"j{copies}")
            )
            if copies == 1:
                print(f"bertprep extract x1: {s:.1f} s")
            jsonl = sorted((work / f"j{copies}").glob("documents-*.jsonl.gz"))
            inputs[f"dump x{copies}"] = [f"mediawiki:{path}"]
            inputs[f"jsonl x{copies}"] = [f"jsonl:{p}" for p in jsonl]

        common = ["--vocab", str(vocab / "vocab.txt"), "--dupe-factor", str(args.dupe_factor), "--overwrite"]
        best = {k: float("inf") for k in inputs}
        for _ in range(args.runs):
            for kind, given in inputs.items():  # alternated, so that a change in the load hits each alike
                flags = [x for g in given for x in ("--input", g)]
                out = work / ("shards-" + kind.replace(" ", ""))
                s, peak = bertprep("pretraining", *flags, "--output", str(out), *common)
                best[kind], rss[f"pretraining {kind}"] = (
                    min(best[kind], s),
                    max(rss.get(f"pretraining {kind}", 0), peak),
                )
        print(f"bertprep pretraining, dupe factor {args.dupe_factor}, in-process runner, best of {args.runs}:")
        for kind, seconds in best.items():
            print(f"  {kind:10s} {seconds:6.1f} s")
        # The fixed cost of a run (start, Beam, vocabulary) cancels in x4 - x1: what 3 dumps' worth of text costs.
        dump, jsonl = best["dump x4"] - best["dump x1"], best["jsonl x4"] - best["jsonl x1"]
        print(
            f"  per 3 dumps' worth (x4 - x1): from the dump {dump:.1f} s, from JSON lines {jsonl:.1f} s: extraction "
            f"{1 - jsonl / dump:.0%} of the dump run's time; {3 * xml_mb / dump:.2f} MB/s of XML, "
            f"{3 * text_mb / dump:.2f} MB/s of text end to end (the JSON lines: {3 * text_mb / jsonl:.2f} MB/s of text)"
        )
        read = read_seconds(3)
        print(
            f"  the read stage alone on 3 dumps: {read:.1f} s, {read / (read + jsonl):.0%} of it plus the JSON lines' "
            "x4 - x1 (the other estimate of extraction's share: steadier when the load moves)"
        )
        print(f"peak RSS, dump x1 -> x4 ({xml_mb:.0f} -> {4 * xml_mb:.0f} MB of XML):")
        for what in ("extract", "pretraining dump", "pretraining jsonl"):
            one, four = rss[f"{what} x1"], rss[f"{what} x4"]
            print(f"  {what:18s} {one / 2**20:5.0f} -> {four / 2**20:5.0f} MiB ({four / one:.2f}x)")


if __name__ == "__main__":
    main()
