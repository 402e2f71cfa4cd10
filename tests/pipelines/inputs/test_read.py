from __future__ import annotations

import bz2
import gzip
import json
import lzma
from collections import Counter

import apache_beam as beam
import pytest
import zstandard
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import COMPRESSED_SUFFIXES, InputError
from bertstream.pipelines.inputs.byte_ranges import iter_lines
from bertstream.pipelines.inputs.formats import LINE_FORMATS
from bertstream.pipelines.inputs.formats.wikiextractor import parse as parse_wikiextractor
from bertstream.pipelines.inputs.read import (
    FileRange,
    ReadDocuments,
    file_ranges,
    range_bytes_for,
    read_documents,
    read_range,
)
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
    assert sum(len(d.paragraphs) for d in docs) == sum(
        len([ln for ln in d.split("\n") if ln.strip()]) for d in raw_docs
    )
    # Stable ids: file + byte offset of the document's first line.
    data = path.read_bytes()
    assert docs[0].doc_id == f"{path}:0"
    second = data.index(b"\n\n") + 2
    assert docs[1].doc_id == f"{path}:{second}" and data[second:].startswith(docs[1].paragraphs[0].encode())


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
    docs = list(parse_wikiextractor(enumerate(lines), "f", c))
    assert [d.paragraphs for d in docs] == [["First para."], ["Second."]]
    assert [d.doc_id for d in docs] == ["f:0", "f:3"]
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


def test_text_format_reads_every_book_of_a_concatenated_file_and_counts_the_cut_lines(tmp_path):
    # Two Gutenberg books in one file: the second used to vanish after the first END marker, uncounted.
    book = (
        "Header of {0}\n*** START OF THE PROJECT GUTENBERG EBOOK {0} ***\n\nText of\nbook {0}.\n\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK {0} ***\nLicence line one.\nLicence line two.\n"
    )
    p = tmp_path / "two.txt"
    p.write_text(book.format("A") + book.format("B"), encoding="utf-8")
    c = Counter()
    docs = docs_of(p, "text", c)
    assert [d.paragraphs for d in docs] == [["Text of book A."], ["Text of book B."]]
    second_start = p.read_bytes().index(b"*** START OF THE PROJECT GUTENBERG EBOOK B")
    assert [d.doc_id for d in docs] == [str(p), f"{p}:{second_start}"]
    assert c[C.GUTENBERG_STRIPPED] == 2
    # Per book: one header line, the END marker, two licence lines (book B's header follows A's licence).
    assert c[C.GUTENBERG_LINES_STRIPPED] == 8
    assert c[C.DOCUMENTS_READ] == 2


def test_text_format_on_crlf_gutenberg_book():
    path = shared_path("pretrain", "gutenberg", "1184-0.txt")  # Monte Cristo has CRLF line endings
    assert b"\r\n" in path.read_bytes()[:10000]
    (doc,) = docs_of(path, "text")
    assert not any("\r" in p for p in doc.paragraphs)
    assert len(doc.paragraphs) > 1000


def test_jsonl_counts_malformed_and_missing_text(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(
        json.dumps({"text": "One. Two.\nNew paragraph.", "id": "a"})
        + "\n{not json\n"
        + json.dumps({"id": "no text"})
        + "\n\n"
        + json.dumps({"text": "Last."})
        + "\n"
        + json.dumps({"text": 5})  # issue 33: counted as a missing field, not what it is
        + "\n",
        encoding="utf-8",
    )
    c = Counter()
    docs = docs_of(p, "jsonl", c)
    assert [d.paragraphs for d in docs] == [["One. Two.", "New paragraph."], ["Last."]]
    assert c[C.drop(C.MALFORMED_JSON)] == 1 and c[C.drop(C.MISSING_TEXT)] == 1 and c[C.drop(C.TEXT_NOT_STRING)] == 1
    assert c[C.DOCUMENTS_READ] == 5  # every document read is either yielded or counted as a drop


def test_invalid_utf8_bom_nul_and_control_characters_are_counted(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(
        b"\xef\xbb\xbfGood line.\r\nBad \xff\xfe bytes here.\r\nNUL\x00 and bell\x07 here.\r\n\r\nA valid \xef\xbf\xbd stays.\n"
    )
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
    assert len(lines) == 1 and lines[0][0] == 0 and len(lines[0][1]) == 5_000_000


@pytest.mark.parametrize(
    "ext,compress",
    [
        (".gz", gzip.compress),
        (".bz2", bz2.compress),
        (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
    ],
)
def test_compressed_inputs_by_extension(tmp_path, ext, compress):
    body = b"First sentence.\nSecond sentence.\n\nOther document.\n"
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
            # b.txt comes without a size (the older 3-tuple): read whole
            | beam.Create([(str(a), "sentences", "a.txt", a.stat().st_size), (str(b), "sentences", "b.txt")])
            | ReadDocuments(range_bytes=5)  # a.txt in 5 ranges
            | beam.FlatMap(lambda batch: [d.doc_id for d in batch.documents])
        )
        assert_that(ids, equal_to(["a.txt:0", "a.txt:15", "b.txt:0"]))  # ids from the names, not the paths


@pytest.mark.parametrize(
    "ext,compress",
    [
        (".gz", gzip.compress),
        (".bz2", bz2.compress),
        (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
    ],
)
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


# --- Reading in byte ranges: the same documents, ids and counters whatever the range size -----------------


def read_whole(path, fmt):
    return read_in_ranges(path, fmt, 0)


def read_in_ranges(path, fmt, range_bytes):
    """Documents (id, paragraphs) and merged counters of reading ``path`` in ranges, as the Beam stage does."""
    ranges = file_ranges(str(path), fmt, "f", path.stat().st_size, range_bytes)
    docs, counters = [], Counter()
    for r in ranges:
        for batch in read_range(r):
            docs.extend((d.doc_id, d.paragraphs) for d in batch.documents)
            counters.update(batch.counters)
    return docs, counters, len(ranges)


def longest_line_middle(data: bytes) -> int:
    lines = data.split(b"\n")
    k = max(range(len(lines)), key=lambda i: len(lines[i]))
    return sum(len(x) + 1 for x in lines[:k]) + len(lines[k]) // 2


@pytest.mark.parametrize(
    "fmt,parts",
    [
        ("wikiextractor", ("pretrain", "wikipedia", "wiki_00")),
        ("sentences", ("pretrain", "chinese", "CLUECorpusSmall_bert_sampled.txt")),
        ("sentences", ("pretrain", "sample_text.txt")),
        ("jsonl", ("pretrain", "chinese", "wiki_zh_2019", "wiki_00")),
    ],
)
def test_real_files_read_in_ranges_of_any_size_give_the_whole_file_reading(fmt, parts):
    path = shared_path(*parts)
    data = path.read_bytes()
    whole, counters, n = read_whole(path, fmt)
    assert n == 1 and whole and counters[C.FILES_READ] == 1 and counters[C.BYTES_READ] == len(data)
    inside_long_line = longest_line_middle(data)  # the first range ends in the middle of the longest line
    sizes = [1000, 1024, 4093, 65536, 333_333, inside_long_line, inside_long_line // 3]
    sizes += [7, 100] if len(data) < 100_000 else []  # sample_text.txt is 4 KB
    for size in [s for s in sizes if s < len(data)]:
        docs, c, n = read_in_ranges(path, fmt, size)
        assert n == -(-len(data) // size) > 1
        assert docs == whole, size
        assert c == counters, size


def test_document_ids_are_byte_offsets_of_raw_bytes():
    path = shared_path("pretrain", "chinese", "zhwiki", "wiki_00")  # multi-byte UTF-8 throughout
    data = path.read_bytes()
    docs, _, _ = read_whole(path, "wikiextractor")
    starts = [i for i in range(len(data)) if data.startswith(b"<doc ", i)]
    assert [d for d, _ in docs] == [f"f:{i}" for i in starts] and len(starts) == 64
    docs, _, _ = read_whole(shared_path("pretrain", "chinese", "wiki_zh_2019", "wiki_00"), "jsonl")
    assert docs[1][0] == "f:" + str(
        shared_path("pretrain", "chinese", "wiki_zh_2019", "wiki_00").read_bytes().index(b"\n") + 1
    )


HOSTILE = {
    "sentences": [
        b"One.\r\nTwo.\r\n\r\nThree.\r\n",  # CRLF
        b"A.\rB.\r\rC.\n\rD.\n\n\n\nE.\r",  # lone CRs, a blank made by a lone CR, trailing lone CR at EOF
        b"First.\nSecond.\n\n\n\n\nThird.\n\n\nFourth without newline",  # runs of blanks, no final newline
        b"\xef\xbb\xbfBOM line.\n\x00\x07\nAfter NUL blank.\n\x0c\nAfter form feed.\n \t \nX\xff\xfe\n\n\xe4\xb8\nY\xef\xbf\xbd.\n",
        b"\n\n\nLeading blanks.\nSecond line\n",
        b"   \n",
    ],
    "wikiextractor": [
        (
            b'<doc id="1" url="u" title="A">\r\nA\r\nPara one.\r\n</doc>\r\n<doc id="2" url="u" title="B">\r\nB\r\nPara two.\r\n</doc>\r\n'
        ),
        (
            b'stray before\n\n<doc id="1">\nT\nOne.\n<doc id="2">\nU\nTwo.\nmore two\n\n<doc id="3">\nV\n'
            b'</doc>\nstray after\n\nstray again\n<doc id="4">\nW\nLast, unclosed, no final newline'
        ),
        (
            b'\xef\xbb\xbf<doc id="1">\nT\nBad \xff bytes.\n</doc>\n\x00<doc id="2">\nT2\nNUL before doc.\n</doc>\n'
            b'<\x07doc id="3">\nT3\nBell inside tag.\n</doc>\n\r<doc id="4">\nT4\nCR before: a line of its own.\n</doc>\n'
            b'<doc id="5">\rT5\rlone CR after the tag\n</doc>\n  <doc id="6">  \nT6\n\xe4\xb8\xad\xe6\x96\x87\n</doc>'
        ),
    ],
    "jsonl": [
        b'{"text": "a\\nb"}\r\n{not json\r\n\r\n{"id": 1}\n[1, 2]\n{"text": "c\\r\\nd\\u0007"}\n{"text": "no final newline"}',
        b'{"text": "x"}\r{"text": "after lone CR"}\n\xff{"text": "bad byte"}\n{"text": "\xe4\xb8\xad"}\n',
    ],
}


@pytest.mark.parametrize("fmt,index", [(f, i) for f, cases in HOSTILE.items() for i in range(len(cases))])
def test_hostile_files_read_in_every_range_size_give_the_whole_file_reading(tmp_path, fmt, index):
    data = HOSTILE[fmt][index]
    path = tmp_path / "hostile"
    path.write_bytes(data)
    whole, counters, _ = read_whole(path, fmt)
    assert counters[C.BYTES_READ] == len(data) and counters[C.LINES] >= 1
    for size in range(1, len(data) + 1):  # every boundary position, every range size
        docs, c, _ = read_in_ranges(path, fmt, size)
        assert docs == whole, size
        assert c == counters, size


def test_hostile_cases_parse_as_intended(tmp_path):
    def whole(fmt, data):
        p = tmp_path / "h"
        p.write_bytes(data)
        docs, c, _ = read_whole(p, fmt)
        return docs, c

    docs, c = whole("wikiextractor", HOSTILE["wikiextractor"][1])
    assert [p for _, p in docs] == [["One."], ["Two.", "more two"], [], ["Last, unclosed, no final newline"]]
    assert c[C.UNCLOSED_DOC] == 3 and c[C.LINES_OUTSIDE_DOC] == 3  # docs 1, 2 and 4 are not closed
    docs, c = whole("wikiextractor", HOSTILE["wikiextractor"][2])
    data = HOSTILE["wikiextractor"][2]
    assert [p for _, p in docs] == [
        ["Bad \ufffd bytes."],
        ["NUL before doc."],
        ["Bell inside tag."],
        ["CR before: a line of its own."],
        ["lone CR after the tag"],
        ["中文"],
    ]
    after_cr = data.index(b'\r<doc id="4"') + 1
    assert docs[3][0] == f"f:{after_cr}"  # the line after the lone CR
    docs, c = whole("sentences", HOSTILE["sentences"][1])
    assert [p for _, p in docs] == [["A.", "B."], ["C."], ["D."], ["E."]]
    assert c[C.LINES] == 11  # A. B. "" C. | "" D. | "" | "" | "" | E. and the empty line after the final lone CR
    docs, c = whole("sentences", HOSTILE["sentences"][3])
    assert [p for _, p in docs] == [
        ["BOM line."],
        ["After NUL blank."],
        ["After form feed."],
        ["X\ufffd\ufffd"],
        ["\ufffd", "Y\ufffd."],
    ]
    assert c[C.INVALID_UTF8] == 3 and c[C.CONTROL_CHARS] == 3
    docs, c = whole("jsonl", HOSTILE["jsonl"][0])
    assert [p for _, p in docs] == [["a", "b"], ["c", "d"], ["no final newline"]]
    assert c[C.drop(C.MALFORMED_JSON)] == 1 and c[C.drop(C.MISSING_TEXT)] == 2 and c[C.DOCUMENTS_READ] == 6


@pytest.mark.parametrize("fmt", LINE_FORMATS)
def test_empty_file_in_ranges(tmp_path, fmt):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    docs, c, n = read_in_ranges(p, fmt, 1)
    assert n == 1 and c[C.FILES_READ] == 1 and c[C.BYTES_READ] == 0
    assert docs == ([("f", [])] if fmt == "text" else [])


def test_compressed_and_text_files_are_read_whole(tmp_path):
    body = b"One.\n\nTwo.\n" * 1000
    gz = tmp_path / "c.txt.gz"
    gz.write_bytes(gzip.compress(body))
    assert file_ranges(str(gz), "sentences", "c", gz.stat().st_size, 10) == [FileRange(str(gz), "sentences", "c")]
    assert len(file_ranges("/x/book.txt", "text", "b", 10**9, 10)) == 1
    assert len(file_ranges("/x/wiki", "wikiextractor", "w", 10**9, 64 << 20)) == 15
    with pytest.raises(ValueError, match="cannot be read in ranges"):
        list(read_documents(str(gz), "sentences", Counter(), start=10, end=20))


def test_range_size_gives_several_ranges_to_a_small_file_and_few_to_a_big_corpus():
    assert -(-10_000_000 // range_bytes_for(10_000_000)) >= 4  # a 10 MB file feeds 2 workers several ranges each
    assert range_bytes_for(20 << 30) == 64 << 20  # 20 GB: 320 ranges
    assert range_bytes_for(1000) == 1 << 20


@pytest.mark.parametrize("ext", COMPRESSED_SUFFIXES)
def test_an_empty_compressed_file_is_refused_naming_it(tmp_path, ext):
    p = tmp_path / f"empty.txt{ext}"
    p.write_bytes(b"")
    with pytest.raises(InputError, match=f"empty.txt\\{ext}.*empty file"):
        docs_of(p, "sentences")


@pytest.mark.parametrize(
    ("compress", "said"),
    [
        (gzip.compress, "is gzip-compressed data .* name it \\*\\.gz"),
        (bz2.compress, "is bzip2-compressed data .* name it \\*\\.bz2"),
        (lzma.compress, "is xz-compressed data .* name it \\*\\.xz"),
        (lambda b: b.decode().encode("utf-16-le"), "looks like UTF-16-LE without a byte-order mark"),
        (lambda b: b.decode().encode("utf-16-be"), "looks like UTF-16-BE without a byte-order mark"),
    ],
)
@pytest.mark.parametrize("fmt", ["sentences", "text", "lines"])
def test_text_that_is_no_utf8_is_refused_naming_what_it_is(tmp_path, compress, said, fmt):
    # issue 44, detection refuses rather than guesses: a gzip file named .txt, read with --format text, was
    # garbled into training text with its control bytes stripped and counted; UTF-16 without a BOM lost its NULs
    from bertstream.pipelines.inputs.read import read_documents

    p = tmp_path / "book.txt"
    body = "One sentence here.\nAnother one there.\n\nA second document, long enough to be text.\n" * 20
    p.write_bytes(compress(body.encode()))
    with pytest.raises(InputError, match=f"book.txt {said}"):
        docs_of(p, fmt)
    if fmt == "sentences":
        with pytest.raises(InputError, match=f"book.txt {said}"):
            list(read_documents(str(p), fmt, Counter(), start=0, end=64))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"])
def test_a_bom_of_another_encoding_is_refused_in_whole_files_and_ranges(tmp_path, encoding):
    from bertstream.pipelines.inputs.read import read_documents

    p = tmp_path / "wide.txt"
    body = "One sentence.\nTwo.\n\nAnother document.\n"
    p.write_bytes(("" if encoding in ("utf-16", "utf-32") else "\ufeff").encode(encoding) + body.encode(encoding))
    with pytest.raises(InputError, match="wide.txt is UTF-"):
        docs_of(p, "sentences")
    with pytest.raises(InputError, match="wide.txt is UTF-"):
        list(read_documents(str(p), "sentences", Counter(), start=0, end=8))
