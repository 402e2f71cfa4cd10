"""The read stage on records: the shared enwiki dump (whole, and as a multistream file read in ranges), Parquet and
Arrow tables (from ``pyarrow`` and from ``datasets``), against the JSON lines of the same text."""

from __future__ import annotations

import bz2
import gzip
import json
from collections import Counter
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.inputs import mediawiki_xml as M
from bertstream.pipelines.inputs.detect import detect_file
from bertstream.pipelines.inputs.read import file_ranges, read_documents, read_range
from tests.conftest import shared_path
from tests.pipelines.inputs.dump_files import DUMP, export, multistream, page


@pytest.fixture(scope="module")
def dump() -> Path:
    return shared_path(*DUMP)


@pytest.fixture(scope="module")
def whole(dump):
    counters: Counter = Counter()
    docs = list(read_documents(str(dump), "mediawiki", counters, name="enwiki.bz2"))
    return docs, counters


@pytest.fixture(scope="module")
def multi(tmp_path_factory, dump) -> Path:
    data, _ = multistream(bz2.decompress(dump.read_bytes()), pages_per_stream=7)
    path = tmp_path_factory.mktemp("multi") / "enwiki-multistream.xml.bz2"
    path.write_bytes(data)
    return path


def test_the_dump_is_its_106_articles_and_every_other_page_a_drop_counted_by_reason(dump, whole):
    docs, counters = whole
    assert len(docs) == 106
    assert counters[C.DOCUMENTS_READ] == 206  # every page is read: 106 articles, 99 redirects, 1 other page
    assert C.dropped(counters) == {M.NOT_ARTICLE_NAMESPACE: 1, M.REDIRECT: 99}
    assert counters[C.BYTES_READ] == dump.stat().st_size  # the file as stored
    # Ids are the page ids (unique in a dump), made unique across files by the file's name.
    assert [d.doc_id for d in docs[:4]] == ["enwiki.bz2:12", "enwiki.bz2:25", "enwiki.bz2:39", "enwiki.bz2:290"]
    assert len({d.doc_id for d in docs}) == 106
    assert [(d.title, d.source_id) for d in docs[:4]] == [
        ("Anarchism", "12"),
        ("Autism", "25"),
        ("Albedo", "39"),
        ("A", "290"),
    ]
    assert not any(d.presegmented for d in docs)


# The first paragraphs of a few articles, as the read stage gives them (the wikitext rules are pinned in detail in
# test_wikitext.py; these check that the stage applies them, with the dump's own namespaces).
PINNED = {
    "Albedo": [
        'Albedo or reflection coefficient, derived from Latin albedo "whiteness" (or reflected sunlight) in turn from '
        'albus "white", is the diffuse reflectivity or reflecting power of a surface.',
    ],
    "A": [
        "A (named, plural As, A's, as, a's or aes) is the first letter and the first vowel in the ISO basic Latin "
        "alphabet. It is similar to the Ancient Greek letter alpha, from which it derives. The upper-case version "
        "consists of the two slanting sides of a triangle, crossed in the middle by a horizontal bar. The lower-case "
        "version can be written in two forms: the double-storey a and single-storey ɑ. The latter is commonly used in "
        "handwriting and fonts based on it, especially fonts intended to be read by children. It is also found in "
        "italic type.",
    ],
    "Autism": [
        "Autism is a neurodevelopmental disorder characterized by impaired social interaction, verbal and non-verbal "
        "communication, and restricted and repetitive behavior. Parents usually notice signs in the first two years of "
        "their child's life. These signs often develop gradually, though some children with autism reach their "
        "developmental milestones at a normal pace and then regress. The diagnostic criteria require that symptoms "
        "become apparent in early childhood, typically before age three.",
    ],
}


@pytest.mark.parametrize("title", sorted(PINNED))
def test_pinned_first_paragraphs(whole, title):
    docs, _ = whole
    (doc,) = [d for d in docs if d.title == title]
    assert doc.paragraphs[: len(PINNED[title])] == PINNED[title]


def test_no_article_keeps_markup(whole):
    docs, _ = whole
    text = "\n".join(p for d in docs for p in d.paragraphs)
    for mark in ("{{", "}}", "[[", "]]", "<ref", "</", "&nbsp;", "&amp;", "''", "{|", "|}", "Category:", "File:"):
        assert mark not in text, mark
    # A page of lists and headings only has no prose: an empty document, dropped later as "empty".
    assert [d.title for d in docs if not d.paragraphs] == ["List of anthropologists"]


@pytest.mark.parametrize("range_bytes", [1, 700_000])  # a range per stream; two or three ranges
def test_a_multistream_dump_read_in_ranges_gives_the_whole_files_documents_and_counters(multi, whole, range_bytes):
    docs, counters = whole
    ranges = file_ranges(str(multi), "mediawiki", "enwiki.bz2", multi.stat().st_size, range_bytes)
    assert len(ranges) > 20 if range_bytes == 1 else 2 <= len(ranges) <= 3
    got, c = [], Counter()
    for r in ranges:
        for batch in read_range(r):
            got += batch.documents
            c.update(batch.counters)
    assert [(d.doc_id, d.title, d.paragraphs) for d in got] == [(d.doc_id, d.title, d.paragraphs) for d in docs]
    assert c[C.FILES_READ] == 1 and c[C.BYTES_READ] == multi.stat().st_size
    del c[C.FILES_READ], c[C.BYTES_READ]
    assert c == Counter({k: v for k, v in counters.items() if k != C.BYTES_READ})


@pytest.mark.parametrize("layout", ["gzip", "streams cut inside pages"])
def test_a_gzip_dump_and_one_whose_streams_end_inside_pages_are_detected_and_read_whole(tmp_path, dump, whole, layout):
    """Both were refused as "malformed XML" by extract and pretraining (issue 44 item 5): the .xml.gz read raw,
    the multistream file cut in ranges whose later streams start inside a page."""
    xml = bz2.decompress(dump.read_bytes())
    if layout == "gzip":
        path, data = tmp_path / "enwiki.xml.gz", gzip.compress(xml)
    else:
        first = xml.index(b"<page>")
        cuts = [0, first, xml.index(b"</text>", first + 100_000), xml.index(b"</text>", first + 300_000), len(xml)]
        path, data = tmp_path / "enwiki.xml.bz2", b"".join(bz2.compress(xml[a:b]) for a, b in zip(cuts, cuts[1:]))
    path.write_bytes(data)
    assert detect_file(str(path)).format == "mediawiki"
    ranges = file_ranges(str(path), "mediawiki", "enwiki.bz2", len(data), 1000)
    assert [(r.start, r.end) for r in ranges] == [(0, len(data))]
    docs = [d for r in ranges for batch in read_range(r) for d in batch.documents]
    assert docs == whole[0]


def test_a_page_without_text_is_a_counted_drop(tmp_path):
    path = tmp_path / "small.xml"
    path.write_text(
        export(
            page("Kept", 1, "<revision><text>Some '''prose''' here.</text></revision>")
            + page("No text", 2, "<revision><id>5</id></revision>")
            + page("Talk:Kept", 3, "<revision><text>Talk.</text></revision>", ns=1)
            + page("Moved", 4, '<redirect title="Kept" /><revision><text>#REDIRECT [[Kept]]</text></revision>')
        )
    )
    counters: Counter = Counter()
    docs = list(read_documents(str(path), "mediawiki", counters, name="small.xml"))
    assert [(d.doc_id, d.paragraphs) for d in docs] == [("small.xml:1", ["Some prose here."])]
    assert C.dropped(counters) == {M.NO_TEXT: 1, M.NOT_ARTICLE_NAMESPACE: 1, M.REDIRECT: 1}
    assert counters[C.DOCUMENTS_READ] == 4


# --- Tables ---------------------------------------------------------------------------------------------------


def records(n: int = 300) -> list[dict]:
    """Records with ids, titles and text of several paragraphs, one with a null text."""
    out = []
    for i in range(n):
        text = f"Record {i} starts here. It has words.\nIts second paragraph, number {i}.\n\n  Third one.  "
        out.append({"id": i * 7, "title": f"Title {i}", "text": None if i == 5 else text})
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["text"] is not None) + '{"id": 35}\n')


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tables")
    rows = records()
    table = pa.Table.from_pylist(rows)
    out = {"parquet": d / "t.parquet", "ipc": d / "t.arrow", "jsonl": d / "t.jsonl", "datasets": d / "saved"}
    pq.write_table(table, out["parquet"], row_group_size=40)
    with pa.ipc.new_file(out["ipc"], table.schema) as w:
        for batch in table.to_batches(max_chunksize=25):
            w.write_batch(batch)
    write_jsonl(out["jsonl"], rows)
    datasets.Dataset.from_list(rows).save_to_disk(str(out["datasets"]), max_shard_size="8KB")
    return out


def _docs(path: Path, fmt: str, counters: Counter) -> list[tuple[str, str, list[str]]]:
    return [(d.source_id, d.title, d.paragraphs) for d in read_documents(str(path), fmt, counters)]


def test_parquet_arrow_and_json_lines_of_the_same_records_give_the_same_documents(tables):
    expected = [
        (
            str(i * 7),
            f"Title {i}",
            [f"Record {i} starts here. It has words.", f"Its second paragraph, number {i}.", "Third one."],
        )
        for i in range(300)
        if i != 5
    ]
    c_jsonl, c_parquet, c_ipc = Counter(), Counter(), Counter()
    assert _docs(tables["jsonl"], "jsonl", c_jsonl) == expected
    assert _docs(tables["parquet"], "parquet", c_parquet) == expected
    assert _docs(tables["ipc"], "arrow", c_ipc) == expected
    saved = sorted(tables["datasets"].glob("*.arrow"))
    assert len(saved) > 1  # a save_to_disk folder of several Arrow stream files
    from_datasets, c_saved = [], Counter()
    for f in saved:
        from_datasets += _docs(f, "arrow", c_saved)
    assert from_datasets == expected
    # The null text is a counted drop in each (in JSON lines: the record without a text field).
    for c in (c_jsonl, c_parquet, c_ipc, c_saved):
        assert C.dropped(c) == {C.MISSING_TEXT: 1} and c[C.DOCUMENTS_READ] == 300


@pytest.mark.parametrize("kind,fmt", [("parquet", "parquet"), ("ipc", "arrow")])
@pytest.mark.parametrize("range_bytes", [1, 3000, 10_000, 0])
def test_tables_read_in_ranges_give_the_whole_files_documents(tables, kind, fmt, range_bytes):
    path = tables[kind]
    whole = [(d.doc_id, d.source_id, d.paragraphs) for d in read_documents(str(path), fmt, Counter(), name="t")]
    assert [d[0] for d in whole[:6]] == ["t:0", "t:1", "t:2", "t:3", "t:4", "t:6"]  # ids: name and row
    ranges = file_ranges(str(path), fmt, "t", path.stat().st_size, range_bytes)
    if range_bytes == 1:
        assert len(ranges) == (8 if fmt == "parquet" else 12)  # a range per row group, per record batch
    got, c = [], Counter()
    for r in ranges:
        for batch in read_range(r):
            got += [(d.doc_id, d.source_id, d.paragraphs) for d in batch.documents]
            c.update(batch.counters)
    assert got == whole
    assert c[C.BYTES_READ] == path.stat().st_size and c[C.FILES_READ] == 1


def test_the_text_field_names_the_column_or_field(tmp_path):
    rows = [{"content": "Some text.", "title": "T"}, {"content": "More text.", "title": "U"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, fmt in (("c.parquet", "parquet"), ("c.jsonl", "jsonl")):
        docs = list(read_documents(str(tmp_path / name), fmt, Counter(), text_field="content"))
        assert [(d.title, d.paragraphs) for d in docs] == [("T", ["Some text."]), ("U", ["More text."])]
