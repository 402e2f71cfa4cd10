"""Byte ranges of one file, so that many workers can read a big file.

A file is cut into ranges ``[start, end)`` of ``range_bytes`` each. A range is read as its *segment*: from the
first *anchor* at or after ``start`` (offset 0 for the first range) up to, not including, the first anchor at or
after ``end`` (or the end of the file). An anchor is a line start (offset 0 or just after a ``\\n``) where the
format's parser holds no state from earlier lines (each format's ``anchor``: ``bertstream.pipelines.inputs.formats``), so:

- the segments of consecutive ranges tile the file (range ``i`` ends where range ``i + 1`` starts), and
- parsing each segment on its own gives exactly what parsing the whole file gives for that part,

whatever the range size. Documents are whole, each counted once, and their ids (file name + byte offset) do
not depend on the split. Only ``\\n`` ends a physical line here: a lone ``\\r`` ends a line for the parser but
is never an anchor, and invalid UTF-8 cannot span a ``\\n``, so segments decode like the whole file.

I/O: a range reads its own bytes plus its last document; a range with no anchor in it reads at most its own
bytes (it is empty), so a file without any anchor costs two passes, not one per range. Memory stays bounded
by a block plus the longest line.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

from bertstream.pipelines.common.files import BLOCK_BYTES, Line, block_lines, record_too_big

TAIL_BYTES = 16 << 10  # first read past a range's end

# A physical line (its bytes without the "\n") -> may a segment start there? None: at every line start.
AnchorTest = Callable[[bytes], bool] | None
# (offset in the file, bytes): a run of whole lines, cut just after a "\n" (the file's last may lack one).
Block = tuple[int, bytes]


def split_ranges(size: int, range_bytes: int) -> list[tuple[int, int | None]]:
    """``[(0, r), (r, 2r), ..., (k r, None)]``; ``None``: to the end of the file, whatever its size by then."""
    if range_bytes <= 0 or size <= range_bytes:
        return [(0, None)]
    starts = list(range(0, size, range_bytes))
    return [(s, s + range_bytes) for s in starts[:-1]] + [(starts[-1], None)]


class LineTooLong(ValueError):
    """A line past the cap of :func:`cut_blocks` (the readers name the file: ``files.record_too_big``)."""

    def __init__(self, offset: int, cap: int) -> None:
        super().__init__(f"the line at byte {offset} holds more than {cap} bytes")
        self.offset, self.cap = offset, cap


def cut_blocks(chunks: Iterable[bytes], offset: int = 0, max_line: int | None = None) -> Iterator[Block]:
    """Re-cut a byte stream at newlines: each block holds whole lines, so a line is never split (a
    multi-megabyte line without a newline is one block) and UTF-8 decodes block by block.

    A line's pieces are joined once, when its newline comes (adding each piece to the whole would copy it again
    and again: quadratic in a long line). A line that spans chunks and passes ``max_line`` bytes raises
    :class:`LineTooLong` (None: no cap); one inside a chunk is bounded by the chunk."""
    pending: list[bytes] = []
    held = 0
    for chunk in chunks:
        if not chunk:
            continue
        cut = chunk.rfind(b"\n") + 1
        if max_line is not None and len(chunk) > max_line:  # (never with the readers' chunks, under the cap)
            _check_lines(chunk, offset - held, max_line)
        if max_line is not None and pending:
            first_end = chunk.find(b"\n")
            if held + (first_end if first_end >= 0 else len(chunk)) > max_line:
                raise LineTooLong(offset, max_line)
        if not cut:
            pending.append(chunk)
            held += len(chunk)
            continue
        block = b"".join([*pending, chunk[:cut]]) if pending else chunk[:cut]
        pending, held = ([chunk[cut:]], len(chunk) - cut) if cut < len(chunk) else ([], 0)
        yield offset, block
        offset += len(block)
    if pending:
        if max_line is not None and held > max_line:
            raise LineTooLong(offset, max_line)
        yield offset, b"".join(pending)


def _check_lines(chunk: bytes, at: int, max_line: int) -> None:
    """Each whole line of a chunk bigger than the cap is under it (``at``: where the chunk's first line starts)."""
    i = 0
    while (j := chunk.find(b"\n", i)) >= 0:
        if j - i > max_line:
            raise LineTooLong(at + i, max_line)
        i = j + 1


def segment_blocks(
    f: BinaryIO,
    start: int,
    end: int | None,
    anchor: AnchorTest,
    block_bytes: int = BLOCK_BYTES,
    max_line: int | None = None,
) -> Iterator[Block]:
    """The blocks of the segment of range ``[start, end)`` of a seekable file, exactly its bytes (a line past
    ``max_line``: :class:`LineTooLong`)."""
    first = 0 if start == 0 else _first_line_start(f, start, end, block_bytes)
    if first is None:
        return
    f.seek(first)
    blocks: Iterator[Block] = cut_blocks(_chunks(f, first, end, block_bytes), first, max_line)
    if start > 0 and anchor is not None:
        found = _skip_to_anchor(blocks, end, anchor)
        if found is None:
            return
        blocks = itertools.chain([found], blocks)
    yield from _until_anchor(blocks, end, anchor)


def _chunks(f: BinaryIO, pos: int, end: int | None, block_bytes: int) -> Iterator[bytes]:
    """Reads that stop at ``end``, then grow from ``TAIL_BYTES``: past its end a range needs only the rest of
    its last document, and an 8 MB read for a few kilobytes would cost more than the range itself."""
    step = TAIL_BYTES
    while True:
        if end is None:
            n = block_bytes
        elif pos < end:
            n = min(block_bytes, end - pos)
        else:
            n, step = step, min(2 * step, block_bytes)  # doubling: a long line is not re-copied per read
        chunk = f.read(n)
        if not chunk:
            return
        pos += len(chunk)
        yield chunk


def _first_line_start(f: BinaryIO, start: int, end: int | None, block_bytes: int) -> int | None:
    """The first line start at or after ``start`` (just after the first "\\n" at or after ``start - 1``), or None
    when there is none before ``end``: then the range holds no segment, and we need not read further."""
    pos = start - 1
    f.seek(pos)
    while end is None or pos < end - 1:  # a "\n" at end - 1 or later starts a line at or after end
        chunk = f.read(block_bytes if end is None else min(block_bytes, end - 1 - pos))
        if not chunk:
            return None
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(chunk)
    return None


def _line_end(block: bytes, i: int) -> int:
    j = block.find(b"\n", i)
    return len(block) if j < 0 else j


def _skip_to_anchor(blocks: Iterator[Block], end: int | None, anchor: Callable[[bytes], bool]) -> Block | None:
    """The rest of the file from the first anchor below ``end``; None when there is none (an empty segment).
    The lines skipped belong to the previous range's segment."""
    for off, block in blocks:
        i = 0
        while i < len(block):
            if end is not None and off + i >= end:
                return None
            stop = _line_end(block, i)
            if anchor(block[i:stop]):
                return off + i, block[i:]
            i = stop + 1
    return None


def _until_anchor(blocks: Iterator[Block], end: int | None, anchor: AnchorTest) -> Iterator[Block]:
    """Every line that starts before ``end``, then lines up to the first anchor."""
    for off, block in blocks:
        if end is None or off + len(block) <= end:  # every line of the block starts before end
            yield off, block
            continue
        if off >= end:
            cut = 0
        else:  # the first line start at or after end: just after the first "\n" at or after end - 1
            j = block.find(b"\n", end - off - 1)
            cut = len(block) if j < 0 else j + 1
        if cut:
            yield off, block[:cut]
        yield from _to_next_anchor(itertools.chain([(off + cut, block[cut:])], blocks), anchor)
        return


def _to_next_anchor(blocks: Iterable[Block], anchor: AnchorTest) -> Iterator[Block]:
    """Lines from a line start at or after the range's end, up to (not including) the first anchor."""
    for off, block in blocks:
        i = 0
        while i < len(block):
            stop = _line_end(block, i)
            if anchor is None or anchor(block[i:stop]):
                if i:
                    yield off, block[:i]
                return
            i = stop + 1
        if block:
            yield off, block


# ------------------------------------------------------------------ the lines of a whole stream (task readers)


def iter_lines(
    chunks: Iterable[bytes], counters: Counter, offset: int = 0, max_line: int | None = None, name: str = ""
) -> Iterator[Line]:
    """``(offset, line)`` for each line of a byte stream (see ``block_lines``).

    Works in blocks cut at newlines, so a multi-megabyte line without a newline is still one line and
    memory stays bounded by the longest line; a line past ``max_line`` bytes is refused, naming file ``name``.
    """
    with line_cap(name):
        for off, raw in cut_blocks(chunks, offset, max_line):
            yield from block_lines(off, raw, counters)


def iter_text_lines(
    chunks: Iterable[bytes], counters: Counter, max_line: int | None = None, name: str = ""
) -> Iterator[str]:
    """The lines of :func:`iter_lines` without their offsets (readers that number lines themselves)."""
    for _, line in iter_lines(chunks, counters, max_line=max_line, name=name):
        yield line


@contextmanager
def line_cap(name: str) -> Iterator[None]:
    """A line past its cap (:class:`LineTooLong`) as the one-line refusal naming file ``name``."""
    try:
        yield
    except LineTooLong as e:
        raise record_too_big(name, f"the line at byte {e.offset}", e.cap) from None
