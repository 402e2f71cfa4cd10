"""Word segmenters for Chinese whole-word masking: jieba (Python) against rjieba (Rust), on the shared text.

Prints each one's speed over the shared Chinese files (CLUECorpusSmall, both Wikipedia files), the share of
lines both cut into the same words, and what the Tokenize stage costs with each against no segmenter.

    PYTHONPATH=. python benchmarks/word_segmenter.py
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FILES = ("CLUECorpusSmall_sampled.txt", "zhwiki/wiki_00", "wiki_zh_2019/wiki_00")


def main() -> None:
    from bertstream.pipelines.common.tokenizer import load_tokenizer
    from bertstream.pipelines.inputs.read import read_documents
    from bertstream.pipelines.pretraining.chinese_words import SEGMENTERS, load_segmenter
    from bertstream.pipelines.pretraining.segmenter import split_sentences
    from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer

    lines = [
        line
        for name in FILES
        for line in (SHARED / "pretrain" / "chinese" / name).read_text(encoding="utf-8").split("\n")
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
    path = SHARED / "pretrain" / "chinese" / "CLUECorpusSmall_sampled.txt"
    for d in read_documents(str(path), "sentences", Counter()):
        docs += [(f"{i}", split_sentences(line)) for i, line in enumerate(d.paragraphs)]
    spec = load_tokenizer(str(SHARED / "vocab" / "bert-base-chinese-vocab.txt"))
    mb = path.stat().st_size / 1e6
    base = None
    for name in ("", *SEGMENTERS):
        tok = DocumentTokenizer(spec, name)
        t = time.perf_counter()
        tok(docs, Counter())
        dt = time.perf_counter() - t
        base = base or dt
        print(f"Tokenize {name or 'no segmenter':12s} {mb / dt:6.2f} MB/s ({dt / base:.1f}x the time without one)")


if __name__ == "__main__":
    main()
