"""The whole pipeline from a MediaWiki dump against the same articles as JSON lines, and peak memory in the dump's
size: one run, every figure a ratio of two measured in it (the machine may be shared: it says its load).

1. ``bertprep pretraining`` from the shared enwiki dump (``mediawiki:``) and from the JSON lines of its articles
   (written by ``bertprep extract`` from that dump: the same documents), alternately, ``--runs`` times each, the
   best of each counted; extraction's share of the dump run's wall time is ``1 - jsonl / dump``. Also the read
   stage alone on the dump (bzip2, XML, wikitext to text: ``read_documents``), in MB/s of compressed input,
   XML and wikitext.
2. Peak resident memory (``ru_maxrss`` of the command's process; Beam's in-process runner) of ``bertprep extract``
   and ``bertprep pretraining`` on the dump and on a dump four times its size (its pages four times, page ids
   renumbered, one bzip2 stream as Wikimedia's non-multistream files), and the ratios.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/wikipedia_pipeline.py [--runs 2] [--dupe-factor 10]
"""

from __future__ import annotations

import argparse
import bz2
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

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


def repeated_dump(xml: bytes, copies: int) -> bytes:
    """The dump's pages ``copies`` times in one export, page ids renumbered so that each stays unique."""
    head, sep, rest = xml.partition(b"  <page>")
    body, end, tail = rest.rpartition(b"</mediawiki>")
    pages = sep + body
    parts = [head]
    for k in range(copies):
        parts.append(_PAGE_ID.sub(lambda m, k=k: m[1] + str(int(m[2]) + k * 10_000_000).encode() + m[3], pages))
    parts.append(end + tail)
    return b"".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="timed runs of each input; the best counts")
    ap.add_argument("--dupe-factor", type=int, default=10, help="BERT's default is 10")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from bertstream.pipelines.pretraining.read import read_documents

    with tempfile.TemporaryDirectory(prefix="wikipedia-bench-") as tmp:
        work = Path(tmp)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared with other jobs)")
        xml = bz2.decompress(DUMP.read_bytes())
        t = time.perf_counter()
        counters: Counter = Counter()
        docs = list(read_documents(str(DUMP), "mediawiki", counters))
        read_s = time.perf_counter() - t
        text_mb = sum(len(p.encode()) + 1 for d in docs for p in d.paragraphs) / 1e6
        bz2_mb, xml_mb = DUMP.stat().st_size / 1e6, len(xml) / 1e6
        print(
            f"read stage alone (bzip2 + XML + wikitext, one thread): {read_s:.2f} s for {bz2_mb:.1f} MB of bz2, "
            f"{xml_mb:.1f} MB of XML -> {text_mb:.1f} MB of text: {bz2_mb / read_s:.2f} MB/s of bz2, "
            f"{xml_mb / read_s:.1f} MB/s of XML"
        )

        vocab = work / "vocab"
        bertprep("vocab", "--input", f"mediawiki:{DUMP}", "--output", str(vocab), "--vocab-size", "8000")
        extract_s, extract_rss = bertprep(
            "extract", "--input", f"mediawiki:{DUMP}", "--output", str(work / "jsonl"), "--no-gzip"
        )
        jsonl = sorted((work / "jsonl").glob("documents-*.jsonl"))
        print(f"bertprep extract: {extract_s:.1f} s, peak RSS {extract_rss / 2**20:.0f} MiB")

        common = ["--vocab", str(vocab / "vocab.txt"), "--dupe-factor", str(args.dupe_factor), "--overwrite"]
        inputs = {"dump": [f"mediawiki:{DUMP}"], "jsonl": [f"jsonl:{p}" for p in jsonl]}
        best = {k: float("inf") for k in inputs}
        rss = {k: 0 for k in inputs}
        for _ in range(args.runs):
            for kind, given in inputs.items():
                flags = [x for g in given for x in ("--input", g)]
                s, peak = bertprep("pretraining", *flags, "--output", str(work / f"shards-{kind}"), *common)
                best[kind], rss[kind] = min(best[kind], s), max(rss[kind], peak)
        share = 1 - best["jsonl"] / best["dump"]
        print(
            f"bertprep pretraining (dupe factor {args.dupe_factor}, in-process runner, best of {args.runs}): "
            f"from the dump {best['dump']:.1f} s, from the same articles as JSON lines {best['jsonl']:.1f} s: "
            f"extraction {share:.0%} of the dump run's wall time; {bz2_mb / best['dump']:.3f} MB/s of bz2, "
            f"{xml_mb / best['dump']:.2f} MB/s of XML end to end"
        )

        big = work / "enwiki-4x.xml.bz2"
        big.write_bytes(bz2.compress(repeated_dump(xml, 4), 9))
        _, extract_rss4 = bertprep("extract", "--input", f"mediawiki:{big}", "--output", str(work / "jsonl4"))
        big_s, rss4 = bertprep("pretraining", "--input", f"mediawiki:{big}", "--output", str(work / "dump4"), *common)
        print(
            f"peak RSS, dump x1 -> x4 ({xml_mb:.0f} -> {4 * xml_mb:.0f} MB of XML): extract "
            f"{extract_rss / 2**20:.0f} -> {extract_rss4 / 2**20:.0f} MiB ({extract_rss4 / extract_rss:.2f}x); "
            f"pretraining {rss['dump'] / 2**20:.0f} -> {rss4 / 2**20:.0f} MiB ({rss4 / rss['dump']:.2f}x); "
            f"pretraining x4 took {big_s / best['dump']:.2f}x the time of x1"
        )


if __name__ == "__main__":
    main()
