"""``bertprep extract``: the shared enwiki dump as JSON lines (one run, module-scoped), read back as ``jsonl:``; the
files the same whatever order the ranges are written in, and together the same lines however the input is cut."""

from __future__ import annotations

import bz2
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertstream.pipelines.cli import main
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.dataset import DatasetHeader, load_manifest
from bertstream.pipelines.extract import ExtractSpec, document_lines, document_record, publish, write_part
from bertstream.pipelines.inputs.documents import Document
from bertstream.pipelines.inputs.read import file_ranges, read_documents
from bertstream.schemas.manifest import Manifest
from tests.conftest import shared_path
from tests.pipelines.inputs.dump_files import DUMP, multistream
from tests.pipelines.inputs.test_records import PINNED


@pytest.fixture(scope="module")
def dump() -> Path:
    return shared_path(*DUMP)


@pytest.fixture(scope="module")
def extracted(tmp_path_factory, dump) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("extract") / "out"
    r = CliRunner().invoke(main, ["extract", "--input", f"mediawiki:{dump}", "--output", str(out)])
    assert r.exit_code == 0, r.output
    return out, r.output


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()]


def test_extract_writes_the_articles_as_json_lines_with_a_manifest(extracted):
    out, output = extracted
    m = load_manifest(str(out))
    assert m.kind == "documents" and [s.path for s in m.shards] == ["documents-00000-of-00001.jsonl.gz"]
    records = [r for s in m.shards for r in lines_of(out / s.path)]
    assert [len(lines_of(out / s.path)) for s in m.shards] == [s.count for s in m.shards]
    assert len(records) == m.totals["documents"] == 105  # 106 articles, one with lists only (no text)
    assert all(set(r) == {"id", "title", "text"} and r["text"] for r in records)
    by_title = {r["title"]: r for r in records}
    assert by_title["Albedo"]["id"] == "39" and by_title["Albedo"]["text"].startswith(
        'Albedo or reflection coefficient, derived from Latin albedo "whiteness"'
    )
    assert len({r["id"] for r in records}) == 105
    assert C.dropped(m.counters) == {"empty": 1, "not_article_namespace": 1, "redirect": 99}
    assert m.counters[C.DOCUMENTS_READ] == 206 and m.inputs[0]["format"] == "mediawiki"
    assert "documents: 206 read, 105 written, dropped (empty: 1, not_article_namespace: 1, redirect: 99)" in output
    r = CliRunner().invoke(main, ["inspect", str(out), "--verify"])
    assert r.exit_code == 0 and "verify: 1/1 shards ok" in r.output, r.output


def test_the_files_read_back_as_json_lines_give_the_read_stages_documents(extracted):
    """The text is the read stage's (the pinned paragraphs of test_records.py), and reading it back as ``jsonl:``
    gives the same paragraphs, ids and titles."""
    out, _ = extracted
    back = []
    for s in load_manifest(str(out)).shards:
        records = lines_of(out / s.path)
        docs = list(read_documents(str(out / s.path), "jsonl", Counter()))
        assert [(d.source_id, d.title, d.paragraphs) for d in docs] == [
            (r["id"], r["title"], r["text"].split("\n")) for r in records
        ]
        back += docs
    by_title = {d.title: d for d in back}
    for title, paragraphs in PINNED.items():
        assert by_title[title].paragraphs[: len(paragraphs)] == paragraphs


def test_a_multistream_dump_in_ranges_gives_the_same_lines_in_the_same_order(tmp_path, dump):
    """A file per range, named in input order whatever order the ranges finish in; together they hold the lines
    of the whole file read as one range, and the counters add up to its counters."""
    xml = bz2.decompress(dump.read_bytes())
    cut = xml.index(b"  <page>", len(xml) // 4)
    data, _ = multistream(xml[:cut] + b"</mediawiki>\n", pages_per_stream=5)
    path = tmp_path / "enwiki-multistream.xml.bz2"
    path.write_bytes(data)
    header = DatasetHeader(vocab={}, parameters={}, inputs=(), run={})

    def extract(range_bytes: int, name: str) -> tuple[list[dict], dict]:
        out, work = tmp_path / name, tmp_path / name / "_work"
        work.mkdir(parents=True)
        spec = ExtractSpec(output_dir=str(out), work_dir=str(work), gzip=True, header=header)
        ranges = file_ranges(str(path), "mediawiki", "enwiki", len(data), range_bytes)
        parts = [write_part(spec, r) for r in reversed(ranges)]  # finished last to first
        m = Manifest.from_json(publish(spec, parts))
        assert [s.path for s in m.shards] == [
            f"documents-{i:05d}-of-{len(ranges):05d}.jsonl.gz" for i in range(len(ranges))
        ]
        return [r for s in m.shards for r in lines_of(out / s.path)], m.counters

    whole, whole_counters = extract(0, "whole")
    split, split_counters = extract(len(data) // 5, "split")
    assert len(whole) > 20 and split == whole
    assert len(list((tmp_path / "split").glob("documents-*"))) >= 4 and len(list(tmp_path.glob("*/_work/*"))) == 0
    assert split_counters == whole_counters


def test_a_record_and_the_documents_without_text():
    doc = Document("saved/x.arrow:4", ["One.", "Two."], title="A title", source_id="")
    assert document_record(doc) == {"id": "saved/x.arrow:4", "title": "A title", "text": "One.\nTwo."}
    counters: Counter = Counter()
    page = Document("enwiki:12", ["Text."], title="T", source_id="12")
    lines = list(document_lines([doc, Document("a:1", []), page], counters))
    assert [json.loads(x)["id"] for x in lines] == ["saved/x.arrow:4", "12"]
    assert counters == {C.DOCUMENTS_USED: 2, C.drop(C.EMPTY): 1}


def test_the_same_input_twice_is_refused_in_one_line_before_anything_is_published(tmp_path):
    """Two identical Parquet files gave identical parts: the manifest was written, then refused as listing a
    file twice ("SchemaError ... no manifest was written", with a manifest and the documents left behind)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": ["1", "2"], "text": ["Hello world. This is a document.", "Another one here."]})
    for name in ("a.parquet", "b.parquet"):
        pq.write_table(table, tmp_path / name)
    out = tmp_path / "out"
    args = ["extract", "--input", str(tmp_path / "a.parquet"), "--input", str(tmp_path / "b.parquet")]
    r = CliRunner().invoke(main, [*args, "--output", str(out)])
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 1 and len(errors) == 1, r.output
    assert "b.parquet (from byte 0) yields the very documents of " in errors[0] and "SchemaError" not in errors[0]
    assert not out.exists() or not any(out.iterdir())


def test_a_wikiextractor_file_cut_inside_a_doc_and_stray_lines_are_said(tmp_path):
    """Round 8: a WikiExtractor file cut short inside its last ``<doc>`` (no ``</doc>``), and lines outside any
    ``<doc>``, were counted in the manifest but the summary said nothing: ``documents: 1 read, 1 written``."""
    src = tmp_path / "wiki_00"
    src.write_text('stray line\n<doc id="1" url="u" title="T">\nT\nOne sentence here. Another one.\n')
    r = CliRunner().invoke(
        main, ["extract", "--input", str(src), "--format", "wikiextractor", "--output", str(tmp_path / "o")]
    )
    assert r.exit_code == 0, r.output
    assert "  altered: lines_outside_doc_skipped 1, unclosed_doc_tags 1\n" in r.output


def test_a_lone_vocabulary_in_the_output_is_someone_elses_even_with_overwrite(tmp_path):
    """Round 8: extract's documents hold no vocab.txt, yet its policy took one as its own (every other dataset
    has one), so `bertprep extract --output DIR --overwrite` deleted a user's lone DIR/vocab.txt."""
    src = tmp_path / "s.txt"
    src.write_text("One sentence here. Another one.\n\nA second document. It ends.\n")
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "vocab.txt").write_text("mine\n")
    args = ["extract", "--input", str(src), "--output", str(tmp_path / "o"), "--overwrite"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "holds files that are not extracted documents' (vocab.txt)" in r.output, r.output
    assert (tmp_path / "o" / "vocab.txt").read_text() == "mine\n"
