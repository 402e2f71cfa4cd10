"""``bertprep extract``: the shared enwiki dump as JSON lines (one run, module-scoped), read back as ``jsonl:``; the
files' bytes independent of how the documents arrive (batches, order: so of the worker count)."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertstream.pipelines.cli import main
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.dataset_run import load_manifest
from bertstream.pipelines.extract import batch_counters, batch_lines, document_record, file_bytes, order_key
from bertstream.pipelines.pretraining.documents import Document, DocumentBatch
from bertstream.pipelines.pretraining.read import read_documents
from tests.conftest import shared_path
from tests.pipelines.pretraining.dump_files import DUMP
from tests.pipelines.pretraining.test_records import PINNED


@pytest.fixture(scope="module")
def dump() -> Path:
    return shared_path(*DUMP)


@pytest.fixture(scope="module")
def extracted(tmp_path_factory, dump) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("extract") / "out"
    r = CliRunner().invoke(main, ["extract", "--input", f"mediawiki:{dump}", "--output", str(out), "--num-shards", "3"])
    assert r.exit_code == 0, r.output
    return out, r.output


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()]


def test_extract_writes_the_articles_as_json_lines_with_a_manifest(extracted):
    out, output = extracted
    m = load_manifest(str(out))
    assert m.kind == "documents" and [s.path for s in m.shards] == [
        f"documents-0000{i}-of-00003.jsonl.gz" for i in range(3)
    ]
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
    assert r.exit_code == 0 and "verify: 3/3 shards ok" in r.output, r.output


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


def test_a_file_is_the_same_bytes_however_its_documents_arrive():
    docs = [Document(f"wiki/{n}.xml:{i}", [f"Text {i}.", "More."], title=f"T{i}") for n in "ab" for i in range(60)]
    docs.append(Document("wiki/a.xml:7000", []))  # no text: dropped, counted

    def files(batches: list[list[Document]]) -> dict[int, bytes]:
        by_file: dict[int, list] = {}
        for b in batches:
            for index, line in batch_lines(DocumentBatch(b), 4):
                by_file.setdefault(index, []).append(line)
        return {i: file_bytes(lines, gzipped=True)[0] for i, lines in sorted(by_file.items())}

    one = files([docs])
    shuffled = docs[:]
    random.Random(3).shuffle(shuffled)
    assert files([shuffled[i : i + 7] for i in range(0, len(shuffled), 7)]) == one and len(one) == 4
    first = gzip.decompress(one[0]).decode().splitlines()
    keys = [order_key(json.loads(x)["id"]) for x in first]
    assert keys == sorted(keys)  # in file order: a name's offsets ascending (10 before 9 would be text order)
    assert batch_counters(DocumentBatch(docs, Counter({C.DOCUMENTS_READ: 121}))) == {
        C.DOCUMENTS_READ: 121,
        C.DOCUMENTS_USED: 120,
        C.drop(C.EMPTY): 1,
    }


def test_ids_titles_and_paragraphs_of_a_record():
    doc = Document("saved/x.arrow:4", ["One.", "Two."], title="A title", source_id="")
    assert document_record(doc) == {"id": "saved/x.arrow:4", "title": "A title", "text": "One.\nTwo."}
    assert order_key("books/a.txt:120") > order_key("books/a.txt:99")
