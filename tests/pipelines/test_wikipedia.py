"""The data people have today through ``bertprep``: the shared enwiki dump (``mediawiki:``) end to end, a multistream
dump's ranges, Parquet files and ``datasets`` folders through the stages' functions; and the bad inputs, each one
``Error:`` line naming the file with nothing published."""

from __future__ import annotations

import bz2
import json
from collections import Counter
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from bertstream.pipelines.cli import main
from bertstream.pipelines.common.dataset import load_manifest
from bertstream.pipelines.inputs.documents import DocumentBatch
from bertstream.pipelines.inputs.read import file_ranges, read_documents
from bertstream.pipelines.inputs.resolve import resolve_inputs
from bertstream.pipelines.pretraining.segment import segment_documents
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer.load import load_tokenizer
from tests.conftest import shared_path
from tests.pipelines.inputs.dump_files import DUMP, multistream


@pytest.fixture(scope="module")
def dump() -> Path:
    return shared_path(*DUMP)


def test_pretraining_reads_the_dump_as_published(tmp_path, dump, demo_vocab):
    out = tmp_path / "shards"
    args = ["pretraining", "--input", f"mediawiki:{dump}", "--vocab", str(demo_vocab / "vocab.txt")]
    r = CliRunner().invoke(main, [*args, "--output", str(out), "--dupe-factor", "1", "--num-shards", "2"])
    assert r.exit_code == 0, r.output
    m = load_manifest(str(out))
    c = m.counters
    assert (c["documents_read"], c["documents_used"]) == (206, 105)
    # Each skip counted by its reason; the one article of lists only has no prose and is dropped as empty.
    drops = {k: v for k, v in c.items() if k.startswith("documents_dropped.")}
    assert drops == {
        "documents_dropped.redirect": 99,
        "documents_dropped.not_article_namespace": 1,
        "documents_dropped.empty": 1,
    }
    assert m.parameters["input_format"] == "mediawiki" and m.totals["instances"] > 1000
    assert "documents: 206 read, 105 used, 101 dropped (empty: 1, not_article_namespace: 1, redirect: 99)" in r.output


def test_a_multistream_dump_splits_at_its_stream_boundaries(tmp_path, dump):
    """Its ranges start where streams start (test_records.py: ranges of any size read exactly the whole file's
    documents and counters, so the shards do not depend on how many workers read them)."""
    xml = bz2.decompress(dump.read_bytes())
    cut = xml.index(b"  <page>", len(xml) // 4)  # a quarter of the pages is enough, and 4x cheaper to compress
    data, offsets = multistream(xml[:cut] + b"</mediawiki>\n", pages_per_stream=5)
    path = tmp_path / "enwiki-multistream.xml.bz2"
    path.write_bytes(data)
    ranges = file_ranges(str(path), "mediawiki", path.name, len(data), len(data) // 4)
    assert len(ranges) >= 2 and {r.start for r in ranges} <= set(offsets)
    assert [r.end for r in ranges[:-1]] == [r.start for r in ranges[1:]] and ranges[-1].end == len(data)


def _bad_inputs(tmp_path: Path, dump: Path) -> dict[str, tuple[str, str]]:
    """name -> (--input, what the error says)"""
    (tmp_path / "cut.xml.bz2").write_bytes(dump.read_bytes()[:150_000])
    (tmp_path / "feed.xml").write_text(
        '<?xml version="1.0"?>\n<rss version="2.0"><channel><title>x</title></channel></rss>\n'
    )
    pq.write_table(pa.table({"content": ["Some text."] * 20}), tmp_path / "content.parquet")
    data = (tmp_path / "content.parquet").read_bytes()
    (tmp_path / "footer.parquet").write_bytes(data[:-8] + b"\xff\xff\xff\x7fPAR1")
    return {
        "truncated bz2": (f"mediawiki:{tmp_path}/cut.xml.bz2", "truncated"),
        "XML that is no MediaWiki export": (f"mediawiki:{tmp_path}/feed.xml", "not a MediaWiki XML export"),
        "Parquet without the text column": (
            f"parquet:{tmp_path}/content.parquet",
            "no column 'text' (its columns: content)",
        ),
        "corrupt Parquet footer": (f"parquet:{tmp_path}/footer.parquet", "not a readable Parquet file"),
    }


# Each case through one command (each command's funnel is the same function, tested on all inputs elsewhere).
BAD = [
    ("truncated bz2", "pretraining"),
    ("XML that is no MediaWiki export", "extract"),
    ("Parquet without the text column", "vocab"),
    ("corrupt Parquet footer", "extract"),
]


@pytest.mark.parametrize("case,command", BAD)
def test_a_bad_input_is_one_error_line_naming_the_file_and_nothing_is_published(
    tmp_path, dump, demo_vocab, case, command
):
    source, says = _bad_inputs(tmp_path, dump)[case]
    out = tmp_path / "out"
    args = [command, "--input", source, "--output", str(out)]
    if command == "pretraining":
        args += ["--vocab", str(demo_vocab / "vocab.txt"), "--dupe-factor", "1"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and says in errors[0] and source.split(":", 1)[1] in errors[0], r.output
    assert "Traceback" not in r.output
    assert not (out / "manifest.json").exists() and not (out / "vocab.txt").exists()


@pytest.fixture(scope="module")
def same_text(tmp_path_factory, demo_corpus) -> dict[str, str]:
    """The pydoc corpus as records (id, title, text), as JSON lines, Parquet and a ``save_to_disk`` folder."""
    d = tmp_path_factory.mktemp("same_text")
    rows = [
        {"id": p.stem, "title": p.stem.replace("_", " "), "text": p.read_text(encoding="utf-8")}
        for p in sorted(demo_corpus.glob("[a-c]*.txt"))
    ]
    (d / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(rows), d / "corpus.parquet", row_group_size=4)
    datasets.Dataset.from_list(rows).save_to_disk(str(d / "saved"), max_shard_size="100KB")
    return {"jsonl": f"jsonl:{d}/corpus.jsonl", "parquet": f"parquet:{d}/corpus.parquet", "arrow": f"arrow:{d}/saved"}


def test_parquet_arrow_and_json_lines_of_the_same_text_give_the_same_documents_sentences_and_tokens(
    same_text, demo_vocab
):
    """The stages' own functions (read, segment, tokenize) on each input, as the pipeline calls them."""
    tokenizer = DocumentTokenizer(load_tokenizer(str(demo_vocab / "vocab.txt")))
    seen = {}
    for kind, source in same_text.items():
        files = resolve_inputs([source])
        assert {f.format for f in files} == {kind} and (kind != "arrow" or len(files) > 1)
        counters: Counter = Counter()
        docs = [d for f in files for d in read_documents(f.path, f.format, counters)]
        sentences, _ = segment_documents(DocumentBatch(docs, counters))
        tokens = tokenizer([(str(i), s) for i, (_, s) in enumerate(sentences)], counters)
        seen[kind] = (
            [(d.source_id, d.title, d.paragraphs) for d in docs],
            [s for _, s in sentences],
            tokens.ids.tolist(),
            tokens.sentence_lengths.tolist(),
        )
    assert len(seen["jsonl"][0]) > 10 and len(seen["jsonl"][2]) > 10_000
    assert seen["parquet"] == seen["jsonl"] == seen["arrow"]


def test_auto_knows_a_dump_parquet_and_a_saved_dataset_by_their_bytes(same_text, dump, tmp_path):
    """``--format auto`` (the default) reads each without its prefix: a bzip2 dump by its ``<mediawiki>`` root,
    Parquet and Arrow by their magic bytes (an Arrow IPC file too); line formats are never tried on them."""
    plain = {fmt: value.split(":", 1)[1] for fmt, value in same_text.items()}
    ipc = tmp_path / "corpus.arrow"
    with pa.ipc.new_file(ipc, pq.read_schema(plain["parquet"])) as writer:
        writer.write_table(pq.read_table(plain["parquet"]))
    cases = {"mediawiki": str(dump), "parquet": plain["parquet"], "arrow": plain["arrow"], "arrow file": str(ipc)}
    for expected, path in cases.items():
        files = resolve_inputs([path], "auto")
        assert {f.format for f in files} == {expected.split()[0]}, (expected, path)
    assert {f.format for f in resolve_inputs([plain["jsonl"]], "auto")} == {"jsonl"}
