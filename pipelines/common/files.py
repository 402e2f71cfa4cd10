"""Reading input files, for every job: raw bytes of any Beam filesystem, decompressed by extension with
integrity checks (a truncated or corrupt file fails, named), refused when not UTF-8, and cut into decoded,
cleaned lines with their byte offsets. The jobs' parsers (the input formats, the task tables, CoNLL and SQuAD)
start from these lines; ``InputError`` is what any of them raises for bad input. Also the paths' own helpers:
local paths made absolute, and which package serves a URL's scheme.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
from collections import Counter
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from itertools import accumulate
from typing import IO

import numpy as np
from apache_beam.io.filesystems import FileSystems

from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import literal
from bertstream.schemas import whole_file
from bertstream.schemas.whole_file import WholeFileError

BLOCK_BYTES = 8 << 20  # what a read takes at a time (read_chunks; byte ranges cut their blocks so too)
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".bz2", ".xz", ".lzma", ".zst", ".zstd")


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufeff\ufffe]")


_VERTICAL = re.compile(r"[\x0b\x0c\x85\u2028\u2029]")


# (byte offset of the line's first byte in the decompressed file, the line cleaned, without terminator)
Line = tuple[int, str]


def absolute(path: str) -> str:
    """A local path made absolute (URLs as they are): workers of a distributed runner would resolve a relative
    path against their own working directory, not the launcher's."""
    return path if "://" in path else os.path.abspath(path)


def read_whole(path: str, what: str) -> bytes:
    """The bytes of a file a command reads whole (a vocabulary, a manifest), bounded as on the trainer's side
    (``bertstream.schemas.whole_file``: a regular file, at most ``MAX_WHOLE_FILE_BYTES``), a URL's through Beam's
    filesystems; else an ``InputError`` naming ``what`` and ``path``. A missing file raises ``FileNotFoundError``
    (the callers say what it should have been)."""
    opener = None if "://" not in path else lambda: FileSystems.open(path, compression_type="uncompressed")
    try:
        with served(path, what):
            return whole_file.read_whole(path, what, opener=opener)
    except WholeFileError as e:
        raise InputError(str(e)) from None


# Beam's words when no filesystem serves a URL's scheme: its package (or Beam's extra) is not installed.
_NO_FILESYSTEM = "Unable to get filesystem from specified path"
# Beam's words when its S3 filesystem is there and its client is not: 2.77 ("Missing boto3 requirement"), 2.78 (its
# S3IO refuses at the first call).
_NO_BOTO3 = ("Missing boto3 requirement", "AWS dependencies are not installed")
_PACKAGES = {
    "s3": "boto3 (pip install 'apache-beam[aws]')",
    "gs": "google-cloud-storage (pip install 'apache-beam[gcp]')",
    "azfs": "azure-storage-blob (pip install 'apache-beam[azure]')",
}


@contextmanager
def served(path: str, what: str) -> Iterator[None]:
    """Around a Beam filesystem call on ``path``: a URL whose scheme no installed filesystem serves is an
    ``InputError`` saying what to install or do (Beam's own words advise ``apache-beam[gcp]`` for any scheme)."""
    try:
        yield
    except ValueError as e:
        missing = missing_filesystem_in(e)
        if missing is None:
            raise
        raise InputError(f"{what} {path}: {missing}") from None


def missing_filesystem_in(e: BaseException) -> str | None:
    """For a URL whose scheme no installed package serves: which package to install, in one sentence."""
    seen: BaseException | None = e
    while seen is not None:
        text = str(seen)
        if any(words in text for words in _NO_BOTO3):  # Beam's S3 filesystem is there, its client is not
            return f"s3:// paths need {_PACKAGES['s3']}, which is not installed"
        if _NO_FILESYSTEM in text:
            m = re.search(r"([a-z][a-z0-9+.-]*)://\S*", text)
            scheme = m.group(1) if m else ""
            need = _PACKAGES.get(scheme)
            if need:
                return f"{scheme}:// paths need {need}, which is not installed"
            return (
                f"{scheme or 'this'}:// paths are not served by any installed Beam filesystem "
                "(Beam reads local paths, gs://, s3://, azfs:// and hdfs://; download http:// files first)"
            )
        seen = seen.__cause__ or seen.__context__
    return None


class InputError(RuntimeError):
    """An input file cannot be read (corrupt compressed data, unreadable path): the run must stop."""


def record_too_big(path: str, record: str, cap: int) -> InputError:
    """The one-line refusal of a record of input past the cap (``bertstream.pipelines.inputs.limits``);
    ``record`` says which, in words ("the line at byte 12")."""
    return InputError(
        f"cannot read {path}: {record} holds more than {cap} bytes, the cap on one record (MAX_RECORD_BYTES): "
        "is the file what it says it is? (split the record to read it)"
    )


def decode_block(raw: bytes, counters: Counter) -> str:
    """UTF-8 decode; invalid bytes become U+FFFD and are counted, never dropped silently."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        # U+FFFD present in valid input is encoded as EF BF BD; only count the ones we introduced.
        counters[C.INVALID_UTF8] += text.count("\ufffd") - raw.count(b"\xef\xbf\xbd")
        return text


def clean_line(line: str, counters: Counter) -> str:
    """Drop control characters and byte-order marks (counted); vertical tabs/form feeds become spaces.

    Neither touches ``\\n`` or ``\\r``, so a whole block cleans exactly like its lines one by one.
    """
    if _VERTICAL.search(line):
        line = _VERTICAL.sub(" ", line)
    line, n = _CONTROL.subn("", line)
    if n:
        counters[C.CONTROL_CHARS] += n
    return line


def parser_view(raw: bytes) -> str:
    """A physical line's first line as a parser sees it: up to a lone CR (or the CR of CRLF), cleaned, stripped
    (where a format's anchors are judged). Its counters are thrown away: the line is counted where it is parsed,
    not where it is judged."""
    scratch: Counter = Counter()
    return clean_line(decode_block(raw.split(b"\r", 1)[0], scratch), scratch).strip()


def block_lines(offset: int, raw: bytes, counters: Counter) -> Iterator[Line]:
    """Decoded, cleaned lines (no terminators) of a block of whole lines starting at byte ``offset``, each with
    its offset; CRLF and lone CR end lines too (a CR that ends the block without a LF is a lone CR).

    The block is decoded and cleaned in one go (UTF-8 and the cleaning keep every ``\\n``), and offsets come
    from the raw bytes (where its newlines are), so they are offsets of raw bytes whatever the text holds.
    """
    text = decode_block(raw, counters)
    if needs_cleaning(raw, text):
        text = clean_line(text, counters)
    lines = text.split("\n")
    terminated = raw.endswith(b"\n")
    if terminated:  # the block ends with a newline: no line after it
        lines.pop()
    # Line k > 0 starts just after the block's newline k - 1: found in C, not by splitting the bytes too.
    newlines = np.flatnonzero(np.frombuffer(raw, np.uint8) == 10)[: len(lines) - 1]
    starts = [offset, *(newlines + (offset + 1)).tolist()] if lines else []
    if "\r" in text:
        if raw.count(b"\r") == raw.count(b"\r\n"):
            # Every CR ends a CRLF (never the unterminated last line's own end: no LF follows it): each line
            # just loses its CR, and starts stay where the newlines are. (Counted in the bytes: a CR, a
            # control character, then LF takes the general path, exactly as before.)
            lines = text.replace("\r\n", "\n").split("\n")
            if terminated:
                lines.pop()
        else:
            raws = raw.split(b"\n")
            if terminated:
                raws.pop()
            starts, lines = _split_carriage_returns(starts, lines, raws, terminated)
    counters[C.LINES] += len(lines)
    return zip(starts, lines)


# What ``clean_line`` removes or replaces, split by how it is cheapest to look for: the ASCII controls in the
# raw bytes (one ``bytes.translate``: a byte below 0x80 is that character in UTF-8, invalid bytes decode to
# U+FFFD), the others in the text, one character at a time (``str.find`` of one character is memchr-fast).
_OTHER_BYTES = bytes(b for b in range(256) if not (b < 0x20 and b not in (0x09, 0x0A, 0x0D) or b == 0x7F))
_CLEANED_NON_ASCII = "\x85\u2028\u2029\ufeff\ufffe"


def needs_cleaning(raw: bytes, text: str) -> bool:
    """Whether ``text`` (decoded from ``raw``) holds a character that ``clean_line`` removes or replaces: most
    blocks hold none, and these looks cost a tenth of the two regex scans of the text."""
    if raw.translate(None, _OTHER_BYTES):  # what is left are the control bytes
        return True
    return not text.isascii() and any(c in text for c in _CLEANED_NON_ASCII)


def _split_carriage_returns(
    starts: list[int], lines: list[str], raws: list[bytes], last_terminated: bool
) -> tuple[list[int], list[str]]:
    """CRLF ends a line (the CR goes); any other CR ends a line of its own, starting just after it."""
    out_starts: list[int] = []
    out_lines: list[str] = []
    last = len(lines) - 1
    for k, (start, line, raw) in enumerate(zip(starts, lines, raws)):
        if "\r" not in line:
            out_starts.append(start)
            out_lines.append(line)
            continue
        if line.endswith("\r") and (k < last or last_terminated):  # CR LF
            line, raw = line[:-1], raw[:-1]
        parts = line.split("\r")
        out_starts.extend(accumulate((len(r) + 1 for r in raw.split(b"\r")[:-1]), initial=start))
        out_lines.extend(parts)
    return out_starts, out_lines


def _decompressed(raw, path: str, block_bytes: int) -> Iterator[bytes]:
    """Decompress by extension with integrity checks.

    Beam's own codecs stop silently at a truncated stream (data loss); Python's gzip/bz2/lzma readers raise
    on truncation and CRC errors, and zstd frames are checked for completeness here.
    """
    lower = path.lower()
    if lower.endswith((".zst", ".zstd")):
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        obj = dctx.decompressobj()
        in_frame = False
        while chunk := raw.read(block_bytes):
            while chunk:
                in_frame = True
                out = obj.decompress(chunk)
                if out:
                    yield out
                chunk = b""
                if obj.eof:  # frame complete; what follows starts another frame
                    chunk, obj, in_frame = obj.unused_data, dctx.decompressobj(), False
        if in_frame:
            raise EOFError("zstd stream ended inside a frame (truncated file)")
        return
    f: IO[bytes] | gzip.GzipFile
    if lower.endswith((".gz", ".gzip")):
        f = gzip.GzipFile(fileobj=raw, mode="rb")
    elif lower.endswith(".bz2"):
        f = bz2.BZ2File(raw, mode="rb")
    elif lower.endswith((".xz", ".lzma")):
        f = lzma.LZMAFile(raw, mode="rb")
    else:
        f = raw
    while chunk := f.read(block_bytes):
        yield chunk


# Byte-order marks of the encodings that are not UTF-8 (UTF-32 first: its LE mark starts with UTF-16's).
_FOREIGN_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32-BE"),
    (b"\xff\xfe\x00\x00", "UTF-32-LE"),
    (b"\xfe\xff", "UTF-16-BE"),
    (b"\xff\xfe", "UTF-16-LE"),
)


# Compressed data whose name does not say so (files are decompressed by their name's ending): the magic number,
# the tool and the ending that makes it read decompressed (None: not read; bzip2's includes its first block's).
_MAGIC_NUMBERS = (
    (re.compile(rb"\x1f\x8b"), "gzip", ".gz"),
    (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "bzip2", ".bz2"),
    (re.compile(rb"\xfd7zXZ\x00"), "xz", ".xz"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd", ".zst"),
    (re.compile(rb"PK\x03\x04"), "zip", None),
)
UTF16_SAMPLE_BYTES = 4096  # of the first chunk, to tell UTF-16 without a byte-order mark by its NULs


def check_utf8_start(path: str, first: bytes) -> None:
    """A file whose text is not UTF-8 is refused, named, with what to do: read as UTF-8 its text would be garbled
    and its NULs and control characters stripped, silently. It starts with a UTF-16 or UTF-32 byte-order mark,
    with a compressor's magic number (its name does not end as the compressor's files do), or is UTF-16 without a
    byte-order mark (every other byte NUL, as English text in UTF-16 has)."""
    for bom, encoding in _FOREIGN_BOMS:
        if first.startswith(bom):
            raise InputError(
                f"{path} is {encoding} (it starts with a {encoding} byte-order mark), not UTF-8: convert it first "
                f"(iconv -f {encoding} -t UTF-8 {path} > {path}.utf8)"
            )
    for magic, tool, ending in _MAGIC_NUMBERS:
        if magic.match(first):
            todo = f"name it *{ending} to have it read decompressed" if ending else "extract it first"
            raise InputError(
                f"{path} is {tool}-compressed data (it starts with {tool}'s magic number), not text: {todo}"
            )
    wide = _utf16_without_bom(first[:UTF16_SAMPLE_BYTES])
    if wide:
        raise InputError(
            f"{path} looks like {wide} without a byte-order mark (every other byte of its start is NUL), not "
            f"UTF-8: convert it first (iconv -f {wide} -t UTF-8 {path} > {path}.utf8)"
        )


def _utf16_without_bom(sample: bytes) -> str | None:
    """UTF-16-LE or -BE when nearly all odd (LE) or even (BE) bytes of ``sample`` are NUL and the others not."""
    if len(sample) < 16:
        return None
    even, odd = sample[0::2], sample[1::2]
    zeros_even, zeros_odd = even.count(0) / len(even), odd.count(0) / len(odd)
    if zeros_odd >= 0.9 and zeros_even <= 0.1:
        return "UTF-16-LE"
    if zeros_even >= 0.9 and zeros_odd <= 0.1:
        return "UTF-16-BE"
    return None


def check_unchanged(path: str, size: int, mtime: float) -> None:
    """The file is still as it was listed (``size`` bytes, modified at ``mtime``; negative size: not checked):
    a file written during the run would be read in part while the manifest records its listed size."""
    if size < 0:
        return
    try:
        if "://" in path:
            found = literal.metadata(path)  # the file listed, not a pattern: s3://b/x[1].txt is not x1.txt
            now_size, now_mtime = (found.size_in_bytes, found.last_updated_in_seconds) if found else (-1, 0.0)
        else:
            st = os.stat(path)
            now_size, now_mtime = st.st_size, st.st_mtime
    except Exception as e:  # gone, unreadable
        raise InputError(f"{path} changed while this run read it: {type(e).__name__}: {e}") from e
    if now_size != size or (mtime and now_mtime and now_mtime != mtime):
        raise InputError(
            f"{path} changed while this run read it (listed {size} bytes, now {now_size}; modified since "
            "it was listed): run again once nothing writes to it"
        )


def read_chunks(path: str, block_bytes: int = BLOCK_BYTES) -> Generator[bytes, None, None]:
    """Raw (decompressed) bytes of a file on any Beam filesystem; failures name the file. A compressed file
    that is empty is refused as its own tool refuses it (gzip, zstd, ...), never read as an empty text."""
    try:
        with FileSystems.open(path, compression_type="uncompressed") as raw:
            first = True
            for chunk in _decompressed(_not_empty(raw, path), path, block_bytes):
                if first:
                    check_utf8_start(path, chunk)
                    first = False
                yield chunk
    except InputError:
        raise
    except Exception as e:  # EOFError, zlib.error, OSError, zstd errors, ...: all fatal, all named
        raise InputError(f"cannot read {path}: {type(e).__name__}: {e}") from e


class _Peeked(io.RawIOBase):
    """A binary stream with its first bytes read already (to see that a compressed file is not empty)."""

    def __init__(self, head: bytes, rest) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        head, self.head = self.head, b""
        if not head:
            return self.rest.read(n)
        # A whole read: gzip reads its 2-byte magic in one call and fails on a short one.
        return head + self.rest.read(-1 if n < 0 else n - len(head))

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def _not_empty(raw, path: str):
    """``raw``, refused when the file is compressed (by its extension) and holds no byte at all."""
    if not path.lower().endswith(COMPRESSED_SUFFIXES):
        return raw
    head = raw.read(1)
    if not head:
        kind = path.lower().rsplit(".", 1)[-1]
        raise EOFError(f"empty file (0 bytes) is not {kind} data (the {kind} tool rejects it too)")
    return _Peeked(head, raw)
