"""MediaWiki dumps for tests: the shared enwiki dump's path, multistream files built from its XML, small exports."""

from __future__ import annotations

import bz2
from itertools import accumulate

DUMP = ("pretrain", "wikidump", "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
EXPORT = "http://www.mediawiki.org/xml/export-0.10/"


def multistream(xml: bytes, pages_per_stream: int) -> tuple[bytes, list[int]]:
    """A multistream file as Wikimedia writes one: the header, then ``pages_per_stream`` pages a stream, then the
    closing tag; with the offsets where its streams start."""
    head, sep, rest = xml.partition(b"  <page>")
    body, end, tail = rest.rpartition(b"</mediawiki>")
    pages = [sep + p for p in body.split(b"  <page>")]
    parts = [head]
    parts += [b"".join(pages[i : i + pages_per_stream]) for i in range(0, len(pages), pages_per_stream)]
    parts.append(end + tail)
    streams = [bz2.compress(p) for p in parts]
    return b"".join(streams), list(accumulate((len(s) for s in streams[:-1]), initial=0))


def export(pages: str, declaration: str = "", siteinfo: str = "") -> str:
    return f'{declaration}<mediawiki xmlns="{EXPORT}" version="0.10">\n{siteinfo}{pages}</mediawiki>\n'


def page(title: str, page_id: int, body: str, ns: int | None = 0) -> str:
    ns_elem = "" if ns is None else f"<ns>{ns}</ns>"
    return f"  <page><title>{title}</title>{ns_elem}<id>{page_id}</id>{body}</page>\n"
