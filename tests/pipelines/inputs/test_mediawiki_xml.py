"""The MediaWiki dump reader on the shared enwiki dump, on multistream files built from it, and on bad input."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs import mediawiki_xml as M
from bertstream.pipelines.inputs.formats import mediawiki
from tests.conftest import shared_path
from tests.pipelines.inputs.dump_files import DUMP, EXPORT, export, multistream, page


@pytest.fixture(scope="module")
def dump() -> Path:
    return shared_path(*DUMP)


@pytest.fixture(scope="module")
def dump_pages(dump) -> list[M.Page]:
    return list(M.read_pages(dump))


@pytest.fixture(scope="module")
def multi(tmp_path_factory, dump) -> tuple[Path, list[int]]:
    """The shared dump rewritten as a multistream file of 9 pages a stream, and where its streams start."""
    data, offsets = multistream(bz2.decompress(dump.read_bytes()), pages_per_stream=9)
    path = tmp_path_factory.mktemp("multistream") / "multi.xml.bz2"
    path.write_bytes(data)
    return path, offsets


def test_the_shared_dump_holds_106_articles_99_redirects_and_one_page_of_another_namespace(dump_pages):
    reasons = Counter(M.drop_reason(p) for p in dump_pages)
    assert reasons == {None: 106, M.REDIRECT: 99, M.NOT_ARTICLE_NAMESPACE: 1}
    other = [p for p in dump_pages if p.namespace != 0]
    assert [(p.page_id, p.title, p.namespace, p.redirect) for p in other] == [
        (724, "Wikipedia:Adding Wikipedia articles to Nupedia", 4, "Wikipedia:Nupedia and Wikipedia")
    ]


def test_page_ids_titles_redirects_and_texts(dump_pages):
    first = dump_pages[0]
    assert (first.page_id, first.title, first.namespace) == (10, "AccessibleComputing", 0)
    assert first.redirect == "Computer accessibility"
    assert first.text == "#REDIRECT [[Computer accessibility]]\n\n{{Redr|move|from CamelCase|up}}"
    by_title = {p.title: p for p in dump_pages}
    anarchism = by_title["Anarchism"]
    # The page's own <id>, not its revision's (716551092) nor a contributor's.
    assert (anarchism.page_id, anarchism.redirect) == (12, None)
    assert anarchism.text is not None and anarchism.text.startswith("{{Redirect2|Anarchist|Anarchists|")
    assert anarchism.text.endswith("[[Category:Anti-capitalism]]\n[[Category:Far-left politics]]")
    assert "&lt;" not in anarchism.text and "<ref>" in anarchism.text  # XML entities are resolved
    assert (dump_pages[-1].page_id, dump_pages[-1].title) == (775, "Algorithm")
    ids = [p.page_id for p in dump_pages]
    assert ids == sorted(set(ids))  # each page once, in dump order


def test_siteinfo(dump):
    info = M.read_siteinfo(dump)
    assert (info.sitename, info.dbname) == ("Wikipedia", "enwiki")
    assert (info.namespaces[0], info.namespaces[6], info.namespaces[14], info.namespaces[-2]) == (
        "",
        "File",
        "Category",
        "Media",
    )
    assert len(info.namespaces) == 35


def test_a_file_object_reads_like_its_path(dump, dump_pages):
    data = dump.read_bytes()
    assert list(M.read_pages(io.BytesIO(data), name="dump.bz2")) == dump_pages
    plain = bz2.decompress(data)
    assert list(M.read_pages(io.BytesIO(plain))) == dump_pages


@pytest.mark.parametrize("range_bytes", [1, 150_000, 600_000, 1 << 30])
def test_ranges_of_a_multistream_file_read_exactly_the_whole_files_pages(multi, dump_pages, range_bytes):
    path, offsets = multi
    data = path.read_bytes()
    assert len(offsets) == 2 + -(-len(dump_pages) // 9)  # header, pages, closing tag
    assert M.stream_offsets(path) == offsets
    ranges = M.stream_ranges(path, range_bytes)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # they tile the file
    assert {start for start, _ in ranges} <= set(offsets)  # each starts where a stream does
    if range_bytes == 1:
        assert ranges == list(zip(offsets, offsets[1:] + [len(data)]))  # every stream its own range
    if range_bytes == 1 << 30:
        assert ranges == [(0, len(data))]
    assert [p for start, end in ranges for p in M.read_range(path, start, end)] == dump_pages
    assert list(M.read_pages(path)) == dump_pages


def test_streams_cut_anywhere_are_one_range_and_a_range_there_is_refused(tmp_path, dump, dump_pages):
    """pbzip2 cuts the text every 900 kB, not at pages: such a file reads whole, never split."""
    xml = bz2.decompress(dump.read_bytes())
    cut = 500_000
    data = b"".join(bz2.compress(xml[i : i + cut]) for i in range(0, len(xml), cut))
    path = tmp_path / "parallel.xml.bz2"
    path.write_bytes(data)
    offsets = M.stream_offsets(path)
    assert len(offsets) == -(-len(xml) // cut)
    assert M.stream_ranges(path, 1) == [(0, len(data))]
    assert list(M.read_pages(path)) == dump_pages
    with pytest.raises(InputError, match=r"parallel\.xml\.bz2.*does not start at a <page>"):
        list(M.read_range(path, offsets[1], offsets[2]))


def test_a_plain_xml_file_or_a_single_stream_is_one_range(tmp_path, dump, dump_pages):
    plain = tmp_path / "dump.xml"
    plain.write_bytes(bz2.decompress(dump.read_bytes()))
    assert M.stream_offsets(plain) == [0]
    assert M.stream_ranges(plain, 1000) == [(0, plain.stat().st_size)]
    assert list(M.read_range(plain, 0, plain.stat().st_size)) == dump_pages
    assert M.stream_offsets(dump) == [0]
    assert M.stream_ranges(dump, 1000) == [(0, dump.stat().st_size)]


def test_a_truncated_bz2_raises_input_error_naming_the_file(tmp_path, dump):
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(dump.read_bytes()[:800_000])
    with pytest.raises(InputError, match=r"cut\.xml\.bz2.*truncated") as e:
        for _ in M.read_pages(path):
            pass
    assert "\n" not in str(e.value)


def test_a_truncated_multistream_range_raises_input_error(tmp_path, multi):
    whole, offsets = multi
    path = tmp_path / "multi.xml.bz2"
    path.write_bytes(whole.read_bytes()[: offsets[5] - 100])  # the fifth page stream loses its end
    with pytest.raises(InputError, match=r"multi\.xml\.bz2.*truncated"):
        list(M.read_range(path, offsets[3], offsets[5]))


def test_corrupt_bz2_raises_input_error(tmp_path, dump):
    data = bytearray(dump.read_bytes())
    data[1000:1100] = bytes(100)
    path = tmp_path / "bad.xml.bz2"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"bad\.xml\.bz2"):
        list(M.read_pages(path))


def test_xml_that_is_no_mediawiki_export_raises_input_error(tmp_path):
    path = tmp_path / "feed.xml"
    path.write_text('<?xml version="1.0"?>\n<rss version="2.0"><channel><title>x</title></channel></rss>\n')
    with pytest.raises(InputError, match=r"feed\.xml: not a MediaWiki XML export \(root element <rss>\)"):
        list(M.read_pages(path))


@pytest.mark.parametrize(
    "xml",
    [
        export(page("A", 1, "<revision><text>x</text></revision>").replace("</title>", "</titel>")),
        export(page("A", 1, "<revision><text>a & b</text></revision>")),
        export(page("A", 1, "<revision><text>x</text></revision>"))[:-40],  # cut inside the page
        "",
    ],
    ids=["mismatched tag", "bare ampersand", "truncated", "empty"],
)
def test_malformed_xml_raises_input_error_naming_the_file(tmp_path, xml):
    path = tmp_path / "broken.xml"
    path.write_text(xml)
    with pytest.raises(InputError, match=r"broken\.xml: malformed XML") as e:
        list(M.read_pages(path))
    assert "\n" not in str(e.value)


def test_a_page_without_text_is_a_no_text_drop_not_an_error(tmp_path):
    path = tmp_path / "export.xml"
    path.write_text(
        export(
            page("No text", 1, "<revision><id>5</id></revision>")
            + page("Deleted", 2, '<revision><id>6</id><text bytes="10" deleted="deleted" /></revision>')
            + page("Empty", 3, '<revision><id>7</id><text xml:space="preserve" /></revision>')
            + page("Two revisions", 4, "<revision><text>old</text></revision><revision><text>new</text></revision>")
        )
    )
    pages = list(M.read_pages(path))
    assert [(p.title, p.text) for p in pages] == [
        ("No text", None),
        ("Deleted", None),
        ("Empty", ""),
        ("Two revisions", "new"),
    ]
    assert [M.drop_reason(p) for p in pages] == [M.NO_TEXT, M.NO_TEXT, M.NO_TEXT, None]


def test_exports_without_ns_or_redirect_elements_take_them_from_the_title_and_text(tmp_path):
    siteinfo = (
        '<siteinfo><namespaces><namespace key="0" /><namespace key="1">Talk</namespace></namespaces></siteinfo>\n'
    )
    path = tmp_path / "old.xml"
    path.write_text(
        export(
            page("Talk:Paris", 1, "<revision><text>Hi</text></revision>", ns=None)
            + page("Paris, France", 2, "<revision><text>#REDIRECT [[Paris]]</text></revision>", ns=None)
            + page("Paris: a novel", 3, "<revision><text>Text</text></revision>", ns=None),
            siteinfo=siteinfo,
        )
    )
    pages = list(M.read_pages(path))
    assert [(p.namespace, p.redirect) for p in pages] == [(1, None), (0, "Paris"), (0, None)]
    assert [M.drop_reason(p) for p in pages] == [M.NOT_ARTICLE_NAMESPACE, M.REDIRECT, None]


def test_a_page_without_a_numeric_id_raises_input_error(tmp_path):
    path = tmp_path / "noid.xml"
    path.write_text(export(page("A", 1, "<revision><text>x</text></revision>").replace("<id>1</id>", "")))
    with pytest.raises(InputError, match=r"noid\.xml: page 'A' has no numeric <id>"):
        list(M.read_pages(path))


@pytest.mark.parametrize(
    ("make", "message"),
    [  # each was a ValueError (int('²'): str.isdigit passes it) or a TypeError naming no file (issue 44)
        (lambda: export(page("A", "²", TEXT)), r"odd\.xml: page 'A' has no numeric <id> \('²'\)"),
        (lambda: export(page("A", 1, TEXT, ns="²")), r"odd\.xml: page 'A' has a non-numeric <ns> \('²'\)"),
        (lambda: export(page("A", 1, TEXT), declaration=ODD.format("rot13")), r"odd\.xml: .*encoding 'rot13'"),
        (lambda: export(page("A", 1, TEXT), declaration=ODD.format("hex")), r"odd\.xml: .*encoding 'hex'"),
    ],
    ids=["id", "ns", "rot13", "hex"],
)
def test_odd_ids_namespaces_and_encodings_raise_input_error_naming_the_file(tmp_path, make, message):
    path = tmp_path / "odd.xml"
    path.write_text(make(), encoding="utf-8")
    with pytest.raises(InputError, match=message):
        list(M.read_pages(path))


def test_a_namespace_key_that_is_no_number_is_not_a_namespace(tmp_path):
    siteinfo = '<siteinfo><namespaces><namespace key="²">Odd</namespace></namespaces></siteinfo>\n'
    path = tmp_path / "odd.xml"
    path.write_text(export(page("Odd:A", 1, TEXT, ns=None), siteinfo=siteinfo), encoding="utf-8")
    assert [(p.title, p.namespace) for p in M.read_pages(path)] == [("Odd:A", 0)]


TEXT = "<revision><text>x</text></revision>"
ODD = '<?xml version="1.0" encoding="{}"?>\n'
LATIN = '<?xml version="1.0" encoding="ISO-8859-1"?>\n'
LATIN_PAGES = page("Zürich", 1, "<revision><text>Zürich liegt am Zürichsee. © 1998, ½ °C</text></revision>") + page(
    "Ça", 2, "<revision><text>Ça ira, garçon.</text></revision>"
)


def test_the_declared_encoding_is_honoured(tmp_path):
    path = tmp_path / "latin.xml"
    path.write_bytes(export(LATIN_PAGES, declaration=LATIN).encode("iso-8859-1"))
    pages = list(M.read_pages(path))
    assert [(p.title, p.text) for p in pages] == [
        ("Zürich", "Zürich liegt am Zürichsee. © 1998, ½ °C"),
        ("Ça", "Ça ira, garçon."),
    ]
    # windows-1252 is not one that expat reads itself: decoded by Python's codec.
    cp1252 = tmp_path / "cp1252.xml"
    text = export(page("Euro", 3, "<revision><text>5 € – “quoted”</text></revision>"), declaration=LATIN)
    cp1252.write_bytes(text.replace("ISO-8859-1", "windows-1252").encode("cp1252"))
    assert [p.text for p in M.read_pages(cp1252)] == ["5 € – “quoted”"]


def test_ranges_of_a_multistream_file_use_the_first_streams_declaration(tmp_path):
    xml = export(LATIN_PAGES * 3, declaration=LATIN).encode("iso-8859-1")
    data, offsets = multistream(xml, pages_per_stream=2)
    path = tmp_path / "latin.xml.bz2"
    path.write_bytes(data)
    ranges = M.stream_ranges(path, 1)
    assert ranges == list(zip(offsets, offsets[1:] + [len(data)]))
    pages = [p for start, end in ranges for p in M.read_range(path, start, end)]
    assert [p.title for p in pages] == ["Zürich", "Ça"] * 3
    assert pages == list(M.read_pages(path))


def test_utf16_is_read_by_its_byte_order_mark(tmp_path):
    path = tmp_path / "wide.xml"
    declaration = '<?xml version="1.0" encoding="UTF-16"?>\n'
    path.write_bytes(export(LATIN_PAGES, declaration).encode("utf-16"))
    assert [p.title for p in M.read_pages(path)] == ["Zürich", "Ça"]
    for declared, encoding in (("UTF-16LE", "utf-16-le"), ("UTF-16BE", "utf-16-be"), ("UTF-16", "utf-16-be")):
        path.write_bytes(export(LATIN_PAGES, ODD.format(declared)).encode(encoding))  # no byte-order mark
        assert [p.title for p in M.read_pages(path)] == ["Zürich", "Ça"]


def test_a_missing_file_raises_input_error(tmp_path):
    with pytest.raises(InputError, match=r"cannot read .*absent\.xml\.bz2: FileNotFoundError"):
        list(M.read_pages(tmp_path / "absent.xml.bz2"))


def test_bytes_invalid_in_the_declared_encoding_raise_input_error(tmp_path):
    path = tmp_path / "ascii.xml"
    declaration = '<?xml version="1.0" encoding="US-ASCII"?>\n'
    path.write_bytes(export(page("Zürich", 1, "<revision><text>x</text></revision>"), declaration).encode("latin-1"))
    with pytest.raises(InputError, match=r"ascii\.xml: not valid US-ASCII text"):
        list(M.read_pages(path))


def synthetic_dump(path: Path, pages: int) -> None:
    text = "Lorem ipsum dolor sit amet, [[consectetur]] adipiscing elit. " * 40
    with bz2.open(path, "wt", encoding="utf-8", compresslevel=1) as f:
        f.write(f'<mediawiki xmlns="{EXPORT}">\n')
        for i in range(pages):
            f.write(page(f"Page {i}", i + 1, f"<revision><id>{i}</id><text>{i} {text}</text></revision>"))
        f.write("</mediawiki>\n")


def peak_bytes(path: Path) -> int:
    tracemalloc.start()
    try:
        count = sum(1 for _ in M.read_pages(path))
        return tracemalloc.get_traced_memory()[1] if count else 0
    finally:
        tracemalloc.stop()


def test_memory_stays_flat_in_the_dumps_size(tmp_path):
    small, large = tmp_path / "small.xml.bz2", tmp_path / "large.xml.bz2"
    # 1 MB and 10 MB of XML, both many times what the parser is fed at once: the peak must not follow the size.
    synthetic_dump(small, 400)
    synthetic_dump(large, 4000)
    small_peak, large_peak = peak_bytes(small), peak_bytes(large)
    assert small_peak > 0
    assert large_peak < 1.2 * small_peak, (small_peak, large_peak)


# --- Bounded work and memory (issue 44 item 1): a record past the cap is refused, named; nothing grows with it.


@pytest.fixture
def small_cap(monkeypatch) -> int:
    cap = 1 << 20
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", cap)
    return cap


def test_white_space_before_the_first_page_past_the_cap_is_refused_by_every_reader(tmp_path, small_cap):
    """The 782-byte dump of 400 MB of white space ran past 200 s (its header was read by adding each piece to
    the whole) and held 1 GB: here 3 MB of it, with a 1 MiB cap."""
    xml = export(" " * (3 << 20) + page("A", 1, TEXT)).encode()
    path = tmp_path / "blank.xml.bz2"
    path.write_bytes(bz2.compress(xml))
    message = rf"blank\.xml\.bz2: the XML before its first <page> holds more than {small_cap} bytes"
    with pytest.raises(InputError, match=message):
        list(M.read_pages(path))
    with pytest.raises(InputError, match=message):
        M.read_siteinfo(path)
    with pytest.raises(InputError, match=message):
        M._header(open(path, "rb"), str(path))  # what each range of a multistream file reads first


def test_a_page_past_the_cap_is_refused_naming_the_file_and_the_cap(tmp_path, small_cap):
    """A 6 KB file holding one huge page took 1.47 GB."""
    big = page("Huge", 2, f"<revision><text>{'a' * (3 << 20)}</text></revision>")
    path = tmp_path / "huge.xml.bz2"
    path.write_bytes(bz2.compress(export(page("A", 1, TEXT) + big).encode()))
    assert len(path.read_bytes()) < 8000
    pages = M.read_pages(path)
    assert next(pages).title == "A"
    with pytest.raises(InputError, match=rf"huge\.xml\.bz2: a <page> holds more than {small_cap} bytes"):
        next(pages)


def test_pages_under_the_cap_read_whole(tmp_path, small_cap):
    text = "b" * (small_cap // 2)
    path = tmp_path / "big.xml.bz2"
    path.write_bytes(bz2.compress(export(page("Big", 1, f"<revision><text>{text}</text></revision>") * 4).encode()))
    assert [p.text for p in M.read_pages(path)] == [text] * 4


# --- Dumps as Wikimedia and others write them (issue 44 item 5)


def test_streams_that_end_inside_pages_past_the_second_are_read_as_one_range(tmp_path, dump, dump_pages):
    """The second stream starts at a page, a later one inside a page (after ``</text>``): bzcat reads the file,
    and so does the reader, as one range; a range that starts there is refused, saying what to do."""
    xml = bz2.decompress(dump.read_bytes())
    first = xml.index(b"<page>")
    cut = xml.index(b"</text>", first + 200_000)
    parts = [xml[:first], xml[first:cut], xml[cut:]]
    data = b"".join(bz2.compress(p) for p in parts)
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(data)
    offsets = M.stream_offsets(path)
    assert len(offsets) == 3
    assert M.stream_ranges(path, 1) == [(0, len(data))]
    docs = list(mediawiki.read(str(path), "cut", Counter(), "text", 0, len(data), 0))
    assert len(docs) == 106
    with pytest.raises(InputError, match=r"cut\.xml\.bz2.*does not start at a <page>.*read the file as one range"):
        list(M.read_range(path, offsets[2], len(data)))


@pytest.mark.parametrize("compress", [gzip.compress, lambda d: lzma.compress(d, preset=0)], ids=["gz", "xz"])
def test_gzip_and_xz_dumps_are_read(tmp_path, dump, dump_pages, compress):
    xml = bz2.decompress(dump.read_bytes())
    path = tmp_path / "dump.xml.gz"
    half = xml.index(b"<page>", len(xml) // 2)
    path.write_bytes(compress(xml[:half]) + compress(xml[half:]))  # two members, as concatenated files are
    assert M.stream_ranges(path, 1) == [(0, path.stat().st_size)]
    assert list(M.read_pages(path)) == dump_pages
    assert M.read_siteinfo(path).dbname == "enwiki"
    docs = list(mediawiki.read(str(path), "d", Counter(), "text", 0, path.stat().st_size, 0))
    assert len(docs) == 106


def test_a_truncated_gzip_dump_and_a_zstd_one_are_refused_naming_the_file(tmp_path, dump):
    xml = bz2.decompress(dump.read_bytes())
    cut = tmp_path / "cut.xml.gz"
    cut.write_bytes(gzip.compress(xml)[:-100])
    with pytest.raises(InputError, match=r"cut\.xml\.gz: the gzip data ends inside a stream"):
        list(M.read_pages(cut))
    zst = tmp_path / "dump.xml.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 100)
    with pytest.raises(InputError, match=r"dump\.xml\.zst: a dump compressed with zstd .* decompress it first"):
        list(M.read_pages(zst))


def test_utf32_is_read_by_its_byte_order_mark_or_its_first_character(tmp_path):
    path = tmp_path / "wide.xml"
    for encoding in ("utf-32", "utf-32-le", "utf-32-be"):
        path.write_bytes(export(LATIN_PAGES, ODD.format("UTF-32")).encode(encoding))
        assert [p.title for p in M.read_pages(path)] == ["Zürich", "Ça"]


@pytest.mark.parametrize(
    ("declared", "encoding", "message"),
    [
        ("UTF-32", "utf-8", r"wrong\.xml: not valid UTF-32 text"),
        ("UTF-16", "utf-8", r"wrong\.xml: not valid UTF-16 text"),
        ("UTF-16BE", "utf-8", r"wrong\.xml: not valid UTF-16BE text: .* its bytes are single-byte text"),
        # expat's "encoding specified in XML declaration is incorrect", called malformed XML (issue 44)
        ("UTF-16BE", "utf-16-le", r"wrong\.xml: its XML declares encoding 'UTF-16BE', but its bytes are UTF-16LE"),
        ("UTF-16LE", "utf-16-be", r"wrong\.xml: its XML declares encoding 'UTF-16LE', but its bytes are UTF-16BE"),
        ("UTF-8", "utf-16-le", r"wrong\.xml: its XML declares encoding 'UTF-8', but its bytes are UTF-16LE"),
        (
            "UTF-32",
            "utf-16-le",
            r"wrong\.xml: its XML declares encoding 'UTF-32', but its bytes are UTF-16LE",
        ),  # was a ValueError
        ("undefined", "utf-8", r"wrong\.xml: its XML declares encoding 'undefined'"),
        ("base64", "utf-8", r"wrong\.xml: its XML declares encoding 'base64'"),
    ],
)
def test_an_encoding_declared_but_unreadable_is_one_line_naming_the_file_and_the_encoding(
    tmp_path, declared, encoding, message
):
    path = tmp_path / "wrong.xml"
    path.write_bytes(export(LATIN_PAGES, ODD.format(declared)).encode(encoding))
    with pytest.raises(InputError, match=message) as e:
        list(M.read_pages(path))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("reader", ["range", "whole file", "format"])
def test_a_multistream_dump_cut_between_two_streams_is_refused(tmp_path, multi, reader):
    """Cut inside a stream it was refused; cut between two, it read as a complete dump, exit 0 (issue 53): the
    last range must close the document itself (only ranges before it lack the root's end tag by design)."""
    whole, offsets = multi
    path = tmp_path / "multi.xml.bz2"
    path.write_bytes(whole.read_bytes()[: offsets[5]])  # four page streams, no closing stream
    size = path.stat().st_size
    with pytest.raises(InputError, match=r"multi\.xml\.bz2: the XML ends before its root element's end tag") as e:
        if reader == "range":
            list(M.read_range(path, offsets[3], size))
        elif reader == "whole file":
            list(M.read_pages(path))
        else:
            list(mediawiki.read(str(path), "m", Counter(), "text", 0, size, 0))
    assert "\n" not in str(e.value)
    assert len(list(M.read_range(whole, offsets[3], offsets[5]))) == 18  # a range before the last reads as ever


def test_a_decompression_bomb_is_decompressed_in_bounded_pieces(tmp_path, monkeypatch):
    """600 bytes of bzip2 holding 400 MB of whitespace before the first page: refused in one line, but only after
    a 1.02 GB peak: the check of where its streams start decompressed the whole stream at once (issue 53). Every
    decompression call now returns at most OUT_BYTES (the bomb here: 40 MB in 150 bytes)."""
    import bz2 as real

    from bertstream.pipelines.inputs import compressed

    c = real.BZ2Compressor(9)
    parts = [c.compress(f'<mediawiki xmlns="{EXPORT}" version="0.10">'.encode())]
    parts += [c.compress(b" " * (1 << 20)) for _ in range(40)]
    parts += [c.compress(page("A", 1, "<revision><text>Text.</text></revision>").encode() + b"</mediawiki>"), c.flush()]
    path = tmp_path / "bomb.xml.bz2"
    path.write_bytes(b"".join(parts))
    largest = [0]
    original = real.BZ2Decompressor

    class Watched:
        def __init__(self) -> None:
            self._d = original()

        def decompress(self, data: bytes, max_length: int = -1) -> bytes:
            out = self._d.decompress(data, max_length)
            largest[0] = max(largest[0], len(out))
            return out

        needs_input = property(lambda self: self._d.needs_input)
        eof = property(lambda self: self._d.eof)
        unused_data = property(lambda self: self._d.unused_data)

    monkeypatch.setattr(compressed.bz2, "BZ2Decompressor", Watched)
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 8 << 20)
    assert mediawiki.ranges(str(path), path.stat().st_size, 1 << 20, "text") == [(0, path.stat().st_size, 0)]
    with pytest.raises(InputError, match="the XML before its first <page> holds more than"):
        list(mediawiki.read(str(path), "b", Counter(), "text", 0, None, 0))
    assert 0 < largest[0] <= compressed.OUT_BYTES
