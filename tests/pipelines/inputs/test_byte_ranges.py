from __future__ import annotations

import io
import random

import pytest

from bertstream.pipelines.inputs.byte_ranges import LineTooLong, cut_blocks, segment_blocks, split_ranges
from tests.conftest import shared_path


class CountingReader(io.BytesIO):
    """A seekable file that counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, n: int = -1) -> bytes:
        out = super().read(n)
        self.bytes_read += len(out)
        return out


def segments(data: bytes, range_bytes: int, anchor, block_bytes: int = 64):
    out = []
    for start, end in split_ranges(len(data), range_bytes):
        blocks = list(segment_blocks(io.BytesIO(data), start, end, anchor, block_bytes))
        for (a, x), (b, _) in zip(blocks, blocks[1:]):
            assert a + len(x) == b  # contiguous
        out.append(blocks)
    return out


def starts_with_x(line: bytes) -> bool:
    return line.startswith(b"x")


def test_split_ranges_cover_the_file_and_the_last_runs_to_its_end():
    assert split_ranges(10, 4) == [(0, 4), (4, 8), (8, None)]
    assert split_ranges(8, 4) == [(0, 4), (4, None)]
    assert split_ranges(4, 4) == split_ranges(0, 4) == split_ranges(10**9, 0) == [(0, None)]


def test_cut_blocks_end_at_newlines_and_carry_offsets():
    assert list(cut_blocks([b"ab\ncd", b"e\nf", b"", b"g"])) == [(0, b"ab\n"), (3, b"cde\n"), (7, b"fg")]
    assert list(cut_blocks([b"no newline", b" at all"], 5)) == [(5, b"no newline at all")]


@pytest.mark.parametrize("anchor", [None, starts_with_x, lambda line: not line.strip()], ids=["every", "x", "blank"])
@pytest.mark.parametrize("seed", range(6))
def test_segments_tile_the_file_and_start_at_anchors(seed, anchor):
    rng = random.Random(seed)
    data = b"".join(rng.choice([b"x", b"y", b"\n", b"\r", b" ", b"\n\n", b"x" * 40, b"\xff"]) for _ in range(300))
    for range_bytes in (1, 2, 3, 7, 50, 128, len(data) - 1):
        segs = segments(data, range_bytes, anchor, block_bytes=rng.choice([1, 5, 64]))
        assert b"".join(b for blocks in segs for _, b in blocks) == data, range_bytes
        for blocks in segs[1:]:
            if blocks:
                off, first = blocks[0]
                assert data[off - 1 : off] == b"\n"
                line = first.split(b"\n", 1)[0]
                assert anchor is None or anchor(line)


def test_every_line_start_is_a_boundary_for_jsonl_ranges():
    data = b"a\nbb\nccc\n"
    assert [[b for _, b in blocks] for blocks in segments(data, 2, None)] == [[b"a\n"], [b"bb\n"], [b"ccc\n"], [], []]


def test_a_file_without_anchors_is_read_about_twice_not_once_per_range():
    data = b"y" * 5000 + b"\n" + b"y" * 3000  # two long lines, no anchor after offset 0
    total = 0
    for start, end in split_ranges(len(data), 100):
        f = CountingReader(data)
        blocks = list(segment_blocks(f, start, end, starts_with_x, block_bytes=64))
        assert (b"".join(b for _, b in blocks) == data) if start == 0 else not blocks
        total += f.bytes_read
    assert total < 2 * len(data) + 64 * 81


def test_wiki_file_segments_are_whole_documents():
    data = shared_path("pretrain", "wikipedia", "wiki_00").read_bytes()
    segs = segments(data, 50_000, lambda line: line.startswith(b"<doc "), block_bytes=1 << 16)
    texts = [b"".join(b for _, b in blocks) for blocks in segs]
    assert b"".join(texts) == data
    assert all(t.startswith(b"<doc ") and t.endswith(b"</doc>\n") for t in texts if t)
    assert sum(t.count(b"<doc ") for t in texts) == data.count(b"<doc ") and sum(1 for t in texts if t) > 10


def test_ranges_read_little_more_than_their_own_bytes():
    data = shared_path("pretrain", "wikipedia", "wiki_00").read_bytes()
    total = 0
    for start, end in split_ranges(len(data), 50_000):
        f = CountingReader(data)
        list(segment_blocks(f, start, end, lambda line: line.startswith(b"<doc ")))  # default 8 MB blocks
        total += f.bytes_read
    assert total < 3 * len(data)  # reads stop at the range's end, then grow from 16 KB to finish a document


class _Piece(bytes):
    """A chunk that counts the bytes of every ``whole + piece`` made of it (a copy of the whole)."""

    copied = 0

    def __radd__(self, other: bytes) -> bytes:
        _Piece.copied += len(other) + len(self)
        return bytes(other) + bytes(self)


def test_a_long_lines_pieces_are_joined_once_not_added_to_the_whole_again_and_again():
    """Adding each piece of a line to the whole copied it once per piece: quadratic in the line (issue 44)."""
    _Piece.copied = 0
    pieces = [_Piece(b"x" * 100) for _ in range(1000)] + [_Piece(b"\nend")]
    assert list(cut_blocks(pieces)) == [(0, b"x" * 100_000 + b"\n"), (100_001, b"end")]
    assert _Piece.copied <= 2 * 100_004


@pytest.mark.parametrize("piece", [7, 64, 1000])
def test_a_line_past_the_cap_is_refused_with_its_offset_whatever_the_chunks(piece):
    data = b"short\n" + b"y" * 300 + b"\n" + b"z" * 200
    chunks = [data[i : i + piece] for i in range(0, len(data), piece)]
    with pytest.raises(LineTooLong, match="the line at byte 6 holds more than 250 bytes"):
        list(cut_blocks(chunks, 0, max_line=250))
    assert b"".join(b for _, b in cut_blocks(chunks, 0, max_line=300)) == data  # at the cap: read
    last = b"short\n" + b"z" * 200
    with pytest.raises(LineTooLong, match="the line at byte 6 holds more than 199 bytes"):
        list(cut_blocks([last[i : i + piece] for i in range(0, len(last), piece)], 0, max_line=199))  # no newline
