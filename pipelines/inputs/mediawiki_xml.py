"""Pages of a MediaWiki XML dump (``enwiki-latest-pages-articles*.xml[.bz2]``), streamed: memory holds one page
and a ``compressed.READ_BYTES`` buffer, whatever the dump's size (or its compression ratio).

Inputs: a path or a binary file object of plain XML, a bzip2 file (one stream) or a *multistream* bzip2 file
(Wikimedia's ``...-multistream.xml.bz2``: many concatenated streams, the first holding the ``<mediawiki>`` header
with ``<siteinfo>``, each later one about 100 whole ``<page>`` elements, the last the closing tag). Compression is
recognised by the content (``BZh``; gzip and xz are read too, as one range; zstd is refused), not the name. Text is decoded as the XML declaration says (UTF-8 when it
says nothing): expat reads UTF-8 itself, any other encoding is decoded by Python's codec first.

- ``read_pages``: every page of a dump, in order (``Page``); ``drop_reason`` says which ones are articles.
- ``stream_ranges`` + ``read_range``: a multistream file cut into ranges of whole streams of about
  ``range_bytes`` each; reading every range gives exactly the pages of ``read_pages``, in the same order.
  A file that is not page-aligned multistream bzip2 (plain XML, one stream, or streams cut anywhere, as pbzip2
  writes them) is one range. ``stream_offsets``: where a file's bzip2 streams start.
- ``read_siteinfo``: the wiki's name and namespaces (names 6 and 14 are its file and category link prefixes:
  ``wikitext.hidden_namespaces_of``).

Every function takes ``name=``, the file's name in messages (default: the path, or a file object's ``name``).

Memory and work: a page (or the XML before the first page) over ``limits.MAX_RECORD_BYTES`` is refused, named;
what is read is decompressed and parsed once, in pieces of ``compressed.READ_BYTES``: work is linear in it.

Bad input raises ``InputError`` with a one-line message naming the file: truncated or corrupt bzip2, malformed
XML, a root element other than ``<mediawiki>``, a page without a numeric ``<id>``, an encoding declared but
unknown or contradicted by the bytes (``UTF-16BE`` over UTF-16LE, ``UTF-16`` over UTF-8: both named). A page
without ``<text>`` is no error: its ``text`` is None (``drop_reason``: ``no_text``).
"""

from __future__ import annotations

import codecs
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO, cast

from bertstream.pipelines.common.counters import reason
from bertstream.pipelines.common.files import InputError, record_too_big
from bertstream.pipelines.inputs import limits
from bertstream.pipelines.inputs.compressed import chunks, decompressed, prepend, scan_stream_starts

# The pages a dump holds that are no articles: dropped, counted per document (``drop_reason``)
NOT_ARTICLE_NAMESPACE = reason("not_article_namespace", ("documents",), "a MediaWiki page not in the article namespace")
REDIRECT = reason("redirect", ("documents",), "a MediaWiki redirect page")
NO_TEXT = reason("no_text", ("documents",), "a MediaWiki page without <text>")

DEFAULT_RANGE_BYTES = 64 << 20

_NUMBER = re.compile(r"-?[0-9]+")  # an id or namespace number, in ASCII digits
_DECLARED_ENCODING = re.compile(rb"""^(?:\xef\xbb\xbf)?\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z][\w.:-]*)["']""")
_ROOT_NAME = re.compile(rb"<((?:[\w.-]+:)?mediawiki)[\s/>]")
_CLOSING_ROOT = re.compile(rb"</(?:[\w.-]+:)?mediawiki\s*>")  # a range may start with the root's end, nothing else
_UTF32_STARTS = (
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"<\x00\x00\x00", "utf-32-le"),
    (b"\x00\x00\x00<", "utf-32-be"),
)
# UTF-16 as expat recognises it (after UTF-32): by its byte-order mark, or by the "<?" of its XML declaration.
_UTF16_STARTS = (
    (b"\xff\xfe", "UTF-16LE", "byte-order mark"),
    (b"\xfe\xff", "UTF-16BE", "byte-order mark"),
    (b"<\x00?\x00", "UTF-16LE", "first characters"),
    (b"\x00<\x00?", "UTF-16BE", "first characters"),
)
_WIDE_CODECS = ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")
# Exports older than 0.5 mark a redirect only in its text.
_REDIRECT_TEXT = re.compile(r"\s*#REDIRECT\s*:?\s*\[\[([^\]|#\n]+)", re.I)

Source = str | os.PathLike[str] | BinaryIO


@dataclass(frozen=True, slots=True)
class Page:
    """One ``<page>``: its own ``<id>`` (not its revision's), title, namespace number, redirect target (None when
    it is no redirect) and the wikitext of its last revision (None when that has no ``<text>`` or it was deleted)."""

    page_id: int
    title: str
    namespace: int
    redirect: str | None
    text: str | None


@dataclass(frozen=True, slots=True)
class SiteInfo:
    """The dump's ``<siteinfo>``: namespace number -> name (``""`` for articles, 6: files, 14: categories)."""

    sitename: str = ""
    dbname: str = ""
    namespaces: Mapping[int, str] = field(default_factory=dict)


def drop_reason(page: Page) -> str | None:
    """None for an article (namespace 0, not a redirect, some text), else why the page is no article."""
    if page.namespace != 0:
        return NOT_ARTICLE_NAMESPACE
    if page.redirect is not None:
        return REDIRECT
    if page.text is None or not page.text.strip():
        return NO_TEXT
    return None


def read_pages(source: Source, *, name: str | None = None) -> Iterator[Page]:
    """Every page of a dump, in order. ``name``: the file's name in error messages (default: its path)."""
    with _opened(source, name) as (f, label):
        yield from _parse(decompressed(chunks(f, 0, None), label), label)


def read_siteinfo(source: Source, *, name: str | None = None) -> SiteInfo:
    """The dump's ``<siteinfo>`` (an empty one when it has none), reading only the file's start."""
    with _opened(source, name) as (f, label):
        parser = _Parser(label)
        for data in decompressed(chunks(f, 0, None), label):
            for _ in parser.feed(data):
                break
            if parser.siteinfo is not None or parser.in_page:
                break
        return parser.siteinfo or SiteInfo()


def stream_offsets(source: Source, *, name: str | None = None) -> list[int]:
    """Byte offsets where the bzip2 streams of a file start (``[0]`` for a file that is not bzip2)."""
    with _opened(source, name) as (f, label):
        f.seek(0)
        if f.read(3) != b"BZh":
            return [0]
        f.seek(0)
        return scan_stream_starts(f)


def stream_ranges(
    source: Source, range_bytes: int = DEFAULT_RANGE_BYTES, *, name: str | None = None
) -> list[tuple[int, int]]:
    """Ranges ``[start, end)`` of whole bzip2 streams that tile the file, each of ``range_bytes`` or more (the
    last at least half that); one range ``[(0, size)]`` unless the file is page-aligned multistream bzip2 (its
    second stream starts at a ``<page>``; ``read_range`` checks each range's start)."""
    with _opened(source, name) as (f, label):
        size = f.seek(0, os.SEEK_END)
        offsets = stream_offsets(f, name=label)
        if len(offsets) < 2 or not _starts_at_page(f, offsets[1], label):
            return [(0, size)]
        ranges = []
        start = 0
        for offset in offsets[1:]:
            if offset - start >= range_bytes:
                ranges.append((start, offset))
                start = offset
        if ranges and size - start < range_bytes // 2:  # a short tail (the closing stream) joins the range before
            start = ranges.pop()[0]
        ranges.append((start, size))
        # Streams may end inside a page past the second (a dump cut by size, not by pages): every range must start
        # at a page, else the file is read as one range, as bzcat reads it.
        if not all(_starts_at_page(f, s, label) for s, _ in ranges[1:]):
            return [(0, size)]
        return ranges


def read_range(source: Source, start: int, end: int, *, name: str | None = None) -> Iterator[Page]:
    """The pages of the streams that start in ``[start, end)`` (a range of ``stream_ranges``), parsed with the
    header (encoding, namespaces) of the file's first stream."""
    with _opened(source, name) as (f, label):
        f.seek(0)
        if f.read(3) != b"BZh":
            if start != 0:
                raise ValueError(f"{label} is not bzip2: its one range is [0, size), not [{start}, {end})")
            yield from _parse(decompressed(chunks(f, 0, None), label), label)
            return
        header = _header(f, label)
        last = end >= f.seek(0, os.SEEK_END)
        data = decompressed(chunks(f, start, end), label)
        if start > 0:
            data = prepend(header.prefix, _checked_page_start(data, label, start))
        # Only a range before the last lacks the root's end tag by design: the last must close the document
        # itself, else the file was cut between two streams (read as complete before, exit 0).
        yield from _parse(data, label, closing=b"" if last else header.closing)


@dataclass(frozen=True, slots=True)
class _Header:
    prefix: bytes  # the first stream's bytes before its first <page>
    closing: bytes  # "</mediawiki>" (with the root's prefix, if any): ends a range that lacks it


@contextmanager
def _opened(source: Source, name: str | None) -> Iterator[tuple[BinaryIO, str]]:
    if isinstance(source, str | os.PathLike):
        label = name or os.fspath(source)
        try:
            f = open(source, "rb")  # noqa: SIM115 (closed below)
        except OSError as e:
            raise InputError(f"cannot read {label}: {type(e).__name__}: {e}") from e
        with f:
            yield f, label
    else:
        yield source, name or str(getattr(source, "name", "<stream>"))


def _first_output(f: BinaryIO, offset: int, label: str) -> bytes:
    """The first decompressed bytes (a whole bzip2 block) of the stream at ``offset``."""
    for out in decompressed(chunks(f, offset, None), label):
        if out:
            return out
    return b""


def _starts_at_page(f: BinaryIO, offset: int, label: str) -> bool:
    return _is_page_start(_first_output(f, offset, label))


def _is_page_start(out: bytes) -> bool:
    """Decompressed bytes start (after white space) at a ``<page>`` or at the root's closing tag: where a range of
    whole pages may start. Anything else (``</text>``, the middle of a page) is a stream cut inside a page."""
    head = out.lstrip()
    return (
        head.startswith(b"<page")
        and head[5:6] in (b">", b" ", b"\t", b"\n", b"\r", b"/")
        or bool(_CLOSING_ROOT.match(head))
    )


def _checked_page_start(data: Iterable[bytes], label: str, start: int) -> Iterator[bytes]:
    it = iter(data)
    for out in it:
        if not out.strip():
            continue
        if not _is_page_start(out):
            raise InputError(
                f"cannot read {label}: the bzip2 stream at byte {start} does not start at a <page> "
                "(not a page-aligned multistream dump): read the file as one range"
            )
        yield out
        break
    yield from it


def _header(f: BinaryIO, label: str) -> _Header:
    """The file's decompressed bytes up to its first ``<page>``: the XML declaration, the root and siteinfo."""
    parts: list[bytes] = []  # joined once: adding each piece to the whole would copy it again and again
    held, tail = 0, b""
    for out in decompressed(chunks(f, 0, None), label):
        parts.append(out)
        held += len(out)
        if b"<page" in tail + out[:5] or b"<page" in out:
            break
        if held > limits.MAX_RECORD_BYTES:
            raise record_too_big(label, "the XML before its first <page>", limits.MAX_RECORD_BYTES)
        tail = out[-4:]
    prefix = b"".join(parts).split(b"<page", 1)[0]
    root = _ROOT_NAME.search(prefix)
    return _Header(prefix, b"</" + (root.group(1) if root else b"mediawiki") + b">")


def _parse(data: Iterable[bytes], label: str, closing: bytes = b"") -> Iterator[Page]:
    """Pages from the XML bytes ``data``; ``closing`` ends a document that lacks its root's end tag."""
    parser = _Parser(label)
    for chunk in data:
        yield from parser.feed(chunk)
    if closing and parser.started and not parser.done:
        yield from parser.feed(closing)
    if parser.started and not parser.done and not parser.in_page:  # (cut inside a page: expat's malformed XML)
        raise InputError(
            f"cannot read {label}: the XML ends before its root element's end tag (</mediawiki>): the file is cut "
            "short (a multistream dump cut between two streams?)"
        )
    yield from parser.close()


class _Parser:
    """An incremental parser of a MediaWiki export: fed bytes, it yields each page once its ``</page>`` is read
    and frees it (and each revision once read), so its tree never holds more than one page."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.xml: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
        self.decoder: codecs.IncrementalDecoder | None = None
        self.encoding = ""  # as the XML declares it, or its UTF-32 byte-order mark says (named in errors)
        self.first = True
        self.started = self.done = self.in_page = False
        self.ns = ""
        self.root: ET.Element | None = None
        self.page: ET.Element | None = None
        self.text: str | None = None
        self.siteinfo: SiteInfo | None = None
        # Bytes fed since the feed in which the last page (or the siteinfo) ended: past the cap, the record being
        # read (a page, or the header before the first) is refused, so the tree never holds more than the cap.
        self.held = 0
        self.ended = False

    def feed(self, data: bytes) -> Iterator[Page]:
        if self.first and data:
            self.first = False
            self._choose_encoding(data)
        decoder = self.decoder
        self.held += len(data)
        return self._pages(lambda: self.xml.feed(data if decoder is None else decoder.decode(data)))

    def close(self) -> Iterator[Page]:
        def finish() -> None:
            if self.decoder is not None:
                self.xml.feed(self.decoder.decode(b"", final=True))
            self.xml.close()

        return self._pages(finish)

    def _pages(self, step: Callable[[], None]) -> Iterator[Page]:
        """Run ``step`` (feed or close), then turn its events into pages."""
        try:
            step()
            # Only start and end events were asked for: each is (event, element).
            events = cast(list[tuple[str, ET.Element]], list(self.xml.read_events()))
        except ET.ParseError as e:
            if self.encoding and "encoding" in str(e):
                raise InputError(
                    f"cannot read {self.label}: its XML declares encoding {self.encoding!r}, which its bytes are not "
                    f"in ({e})"
                ) from e
            raise InputError(f"cannot read {self.label}: malformed XML ({e})") from e
        except UnicodeError as e:  # (a decode error, or the base class some codecs raise: idna's)
            encoding = self.encoding or getattr(e, "encoding", "") or "its declared encoding's"
            raise InputError(f"cannot read {self.label}: not valid {encoding} text ({e})") from e
        self.ended = False
        for event, elem in events:
            page = self._event(event, elem)
            if page is not None:
                yield page
        if self.ended:
            self.held = 0
        elif self.held > limits.MAX_RECORD_BYTES:
            record = "a <page>" if self.in_page else "the XML before its first <page>"
            raise record_too_big(self.label, record, limits.MAX_RECORD_BYTES)

    def _choose_encoding(self, data: bytes) -> None:
        # UTF-32, which expat does not read, by its byte-order mark or its "<" (expat reads UTF-16 itself).
        for start, encoding in _UTF32_STARTS:
            if data.startswith(start):
                self.encoding, self.decoder = encoding, codecs.getincrementaldecoder(encoding)("strict")
                return
        wide = next(((form, how) for start, form, how in _UTF16_STARTS if data.startswith(start)), None)
        # A UTF-16 declaration is looked for in its characters (the regex reads single bytes).
        head = (
            data if wide is None else data[:1024].decode(wide[0], "replace").lstrip("\ufeff").encode("ascii", "replace")
        )
        m = _DECLARED_ENCODING.match(head)
        if not m:
            return
        declared = self.encoding = m.group(1).decode("ascii")
        try:
            info = codecs.lookup(declared)
            "".encode(declared)  # refuses a codec of bytes to bytes (hex, zlib) or text to text (rot13)
        except (LookupError, UnicodeError) as e:  # (the "undefined" codec refuses even "")
            raise InputError(f"cannot read {self.label}: its XML declares encoding {declared!r}, unknown here") from e
        if wide is not None:
            # expat reads UTF-16 itself, but a declaration its bytes contradict ends in its "encoding specified in
            # XML declaration is incorrect" (or, for a codec it asks Python for, a ValueError): named here.
            form, how = wide
            if info.name not in ("utf-16", codecs.lookup(form).name):
                raise InputError(
                    f"cannot read {self.label}: its XML declares encoding {declared!r}, but its bytes are {form} "
                    f"(by its {how}): correct the declaration or convert the file"
                )
            return
        if info.name in _WIDE_CODECS:  # its declaration was just read in single bytes: the text is not wide
            raise InputError(
                f"cannot read {self.label}: not valid {declared} text: its XML declares encoding {declared!r}, but "
                "its bytes are single-byte text (ASCII or UTF-8, as its declaration is written)"
            )
        if info.name != "utf-8":
            # expat reads only a few encodings itself; fed text, it ignores the declaration.
            self.decoder = info.incrementaldecoder("strict")

    def _event(self, event: str, elem: ET.Element) -> Page | None:
        tag = elem.tag
        if not self.started:
            self._start_root(elem)
            return None
        if event == "start":
            if tag == self.ns + "page":
                self.page, self.text, self.in_page = elem, None, True
            return None
        if tag == self.ns + "revision" and self.page is not None:
            self._revision(elem)
        elif tag == self.ns + "page":
            return self._end_page(elem)
        elif tag == self.ns + "siteinfo":
            self.siteinfo = _siteinfo(elem, self.ns)
            self.ended = True
            if self.root is not None:
                del self.root[:]
        elif elem is self.root:
            self.done = True
        return None

    def _start_root(self, elem: ET.Element) -> None:
        ns, _, local = elem.tag.rpartition("}")
        if local != "mediawiki":
            raise InputError(f"cannot read {self.label}: not a MediaWiki XML export (root element <{local}>)")
        self.ns = ns + "}" if ns else ""
        self.root, self.started = elem, True

    def _revision(self, rev: ET.Element) -> None:
        """Keep the revision's text (the last revision's wins), then free the revision."""
        text = rev.find(self.ns + "text")
        self.text = None if text is None or text.get("deleted") is not None else text.text or ""
        self.page.remove(rev)  # type: ignore[union-attr]

    def _end_page(self, page: ET.Element) -> Page:
        ns = self.ns
        title = page.findtext(ns + "title") or ""
        raw_id = (page.findtext(ns + "id") or "").strip()
        if not _NUMBER.fullmatch(raw_id):  # (str.isdigit passes '²', which int() refuses)
            raise InputError(f"cannot read {self.label}: page {title!r} has no numeric <id> ({raw_id!r})")
        raw_ns = page.findtext(ns + "ns")
        redirect_elem = page.find(ns + "redirect")
        redirect = None if redirect_elem is None else redirect_elem.get("title", "")
        text = self.text
        if redirect_elem is None and text is not None and (m := _REDIRECT_TEXT.match(text)):
            redirect = m.group(1).strip()
        if raw_ns is None:  # exports older than 0.6: the namespace is the title's prefix
            namespace = self._namespace_of(title)
        elif _NUMBER.fullmatch(raw_ns.strip()):
            namespace = int(raw_ns)
        else:
            raise InputError(f"cannot read {self.label}: page {title!r} has a non-numeric <ns> ({raw_ns!r})")
        if self.root is not None:
            del self.root[:]  # the page and anything before it: the tree stays one page deep
        self.page, self.text, self.in_page, self.ended = None, None, False, True
        return Page(int(raw_id), title, namespace, redirect, text)

    def _namespace_of(self, title: str) -> int:
        prefix, colon, _ = title.partition(":")
        if colon and self.siteinfo is not None:
            for key, name in self.siteinfo.namespaces.items():
                if name and name == prefix:
                    return key
        return 0


def _siteinfo(elem: ET.Element, ns: str) -> SiteInfo:
    namespaces = {}
    for n in elem.iter(ns + "namespace"):
        key = n.get("key", "")
        if _NUMBER.fullmatch(key):
            namespaces[int(key)] = n.text or ""
    return SiteInfo(elem.findtext(ns + "sitename") or "", elem.findtext(ns + "dbname") or "", namespaces)
