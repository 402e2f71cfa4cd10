from __future__ import annotations

import bz2
import gzip
import json
from collections import Counter

import apache_beam as beam
import pytest
import zstandard
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import counters as C
from pipelines.read import InputError, ReadDocuments, iter_lines, parse_wikiextractor, read_documents
from tests.conftest import shared_path


def docs_of(path, fmt, counters=None):
    return list(read_documents(str(path), fmt, counters if counters is not None else Counter()))


def test_sentences_format_on_bert_sample_text():
    path = shared_path("pretrain", "sample_text.txt")
    docs = docs_of(path, "sentences")
    raw_docs = [d for d in path.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    assert len(docs) == len(raw_docs)
    assert docs[0].paragraphs[0].startswith("This text is included to make sure Unicode is handled properly")
    assert all(d.presegmented for d in docs)
    assert sum(len(d.paragraphs) for d in docs) == sum(len([l for l in d.split("\n") if l.strip()]) for d in raw_docs)
    # Stable ids: file + starting line.
    assert docs[0].doc_id == f"{path}:1"
    assert docs[1].doc_id.startswith(f"{path}:") and int(docs[1].doc_id.rsplit(":", 1)[1]) > 1


def test_wikiextractor_skips_title_and_keeps_paragraphs():
    path = shared_path("pretrain", "wikipedia", "wiki_00")
    docs = docs_of(path, "wikiextractor")
    text = path.read_text(encoding="utf-8")
    assert len(docs) == text.count("<doc ")
    first = docs[0]
    assert first.paragraphs[0].startswith("Anarchism is a political philosophy")  # the title line "Anarchism" is gone
    assert "Anarchism" not in first.paragraphs[:1]


def test_wikiextractor_unclosed_doc_is_kept_and_counted():
    c = Counter()
    lines = ['<doc id="1" url="u" title="A">', "A", "First para.", '<doc id="2" url="u" title="B">', "B", "Second."]
    docs = list(parse_wikiextractor(lines, "f", c))
    assert [d.paragraphs for d in docs] == [["First para."], ["Second."]]
    assert c[C.UNCLOSED_DOC] == 2


def test_text_format_joins_hard_wrapped_lines_and_strips_gutenberg(tmp_path):
    p = tmp_path / "book.txt"
    p.write_text(
        "The Project Gutenberg eBook of X\nLicence blah.\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n"
        "It was a dark\nand stormy night.\n\nThe end came\nsoon.\n\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nLicence.\n",
        encoding="utf-8",
    )
    c = Counter()
    (doc,) = docs_of(p, "text", c)
    assert doc.paragraphs == ["It was a dark and stormy night.", "The end came soon."]
    assert doc.doc_id == str(p)
    assert c[C.GUTENBERG_STRIPPED] == 1


def test_text_format_on_crlf_gutenberg_book():
    path = shared_path("pretrain", "gutenberg", "1184-0.txt")  # Monte Cristo has CRLF line endings
    assert b"\r\n" in path.read_bytes()[:10000]
    (doc,) = docs_of(path, "text")
    assert not any("\r" in p for p in doc.paragraphs)
    assert len(doc.paragraphs) > 1000


def test_jsonl_counts_malformed_and_missing_text(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(
        json.dumps({"text": "One. Two.\nNew paragraph.", "id": "a"}) + "\n{not json\n"
        + json.dumps({"id": "no text"}) + "\n\n" + json.dumps({"text": "Last."}) + "\n",
        encoding="utf-8",
    )
    c = Counter()
    docs = docs_of(p, "jsonl", c)
    assert [d.paragraphs for d in docs] == [["One. Two.", "New paragraph."], ["Last."]]
    assert c[C.drop(C.MALFORMED_JSON)] == 1 and c[C.drop(C.MISSING_TEXT)] == 1
    assert c[C.DOCUMENTS_READ] == 4  # every document read is either yielded or counted as a drop


def test_invalid_utf8_bom_nul_and_control_characters_are_counted(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"\xef\xbb\xbfGood line.\r\nBad \xff\xfe bytes here.\r\nNUL\x00 and bell\x07 here.\r\n\r\nA valid \xef\xbf\xbd stays.\n")
    c = Counter()
    docs = docs_of(p, "sentences", c)
    assert docs[0].paragraphs == ["Good line.", "Bad \ufffd\ufffd bytes here.", "NUL and bell here."]
    assert docs[1].paragraphs == ["A valid \ufffd stays."]
    assert c[C.INVALID_UTF8] == 2  # the pre-existing U+FFFD is not counted
    assert c[C.CONTROL_CHARS] == 3  # BOM, NUL, BEL


def test_five_megabyte_line_without_newline_is_one_line():
    chunks = [b"word " * 200_000, b"word " * 800_000]  # 5 MB, no newline at all, split across blocks
    c = Counter()
    lines = list(iter_lines(chunks, c))
    assert len(lines) == 1 and len(lines[0]) == 5_000_000


@pytest.mark.parametrize("ext,compress", [
    (".gz", gzip.compress), (".bz2", bz2.compress), (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_compressed_inputs_by_extension(tmp_path, ext, compress):
    body = "First sentence.\nSecond sentence.\n\nOther document.\n".encode()
    p = tmp_path / f"c.txt{ext}"
    p.write_bytes(compress(body))
    docs = docs_of(p, "sentences")
    assert [d.paragraphs for d in docs] == [["First sentence.", "Second sentence."], ["Other document."]]


def test_corrupt_gzip_names_the_file(tmp_path):
    p = tmp_path / "broken.txt.gz"
    good = gzip.compress(("A sentence.\n" * 10000).encode())
    p.write_bytes(good[: len(good) // 2] + b"\x00garbage" * 50)
    with pytest.raises(InputError, match="broken.txt.gz"):
        docs_of(p, "sentences")


def test_empty_file_gives_no_documents(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_bytes(b"")
    assert docs_of(p, "sentences") == []
    (doc,) = docs_of(p, "text")  # a text file is a document, even an empty one (dropped later, counted)
    assert doc.paragraphs == []


def test_read_documents_composite_on_runner(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("A one.\nA two.\n\nA three.\n", encoding="utf-8")
    b.write_text("B one.\n", encoding="utf-8")
    with TestPipeline(runner=FnApiRunner()) as p:
        ids = (
            p
            | beam.Create([(str(a), "sentences", "a.txt"), (str(b), "sentences", "b.txt")])
            | ReadDocuments()
            | beam.FlatMap(lambda batch: [d.doc_id for d in batch.documents])
        )
        assert_that(ids, equal_to(["a.txt:1", "a.txt:4", "b.txt:1"]))  # ids from the names, not the paths


@pytest.mark.parametrize("ext,compress", [
    (".gz", gzip.compress), (".bz2", bz2.compress), (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_truncated_compressed_input_fails_instead_of_losing_data(tmp_path, ext, compress):
    data = compress("".join(f"Sentence number {i}.\n" for i in range(50000)).encode())
    p = tmp_path / f"cut.txt{ext}"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=f"cut.txt{ext}"):
        docs_of(p, "sentences")


def test_multi_frame_zstd_is_read_whole(tmp_path):
    c = zstandard.ZstdCompressor()
    p = tmp_path / "frames.txt.zst"
    p.write_bytes(c.compress(b"One.\nTwo.\n") + c.compress(b"\nThree.\n"))
    assert [d.paragraphs for d in docs_of(p, "sentences")] == [["One.", "Two."], ["Three."]]
