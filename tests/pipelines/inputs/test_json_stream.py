"""A JSON document streamed a value at a time ends as ``json.loads`` of the whole file would, word for word,
however its bytes are cut, with a cap on each value."""

from __future__ import annotations

import json
import random

import pytest

from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.inputs import json_stream as JS

DOC = json.dumps(
    {
        "version": "1.1",
        "data": [
            {"title": "Zürich ½", "paragraphs": [{"context": 'a\\nb "q" €', "qas": [{"id": "1", "x": [1.5, -2e3]}]}]},
            {"title": "B\\", "paragraphs": [], "flags": [True, False, None]},  # ends in an escaped backslash
        ],
        "extra": {"k": [1, 2, {"z": "y"}]},
    },
    indent=1,
    ensure_ascii=False,
).encode()


def whole(raw: bytes) -> object:
    """The former reading: the whole file decoded, then ``json.loads`` (its error in the same words), with the
    documented difference: ``data`` given twice is refused ("shape"), where ``json.loads`` keeps the last."""
    tops: list = []
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=lambda pairs: tops.append(pairs) or dict(pairs))
    except UnicodeDecodeError as e:
        return f"UnicodeDecodeError: {e}"
    except ValueError as e:
        return f"{type(e).__name__}: {e}"
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        return "shape"
    return "shape" if [k for k, _ in tops[-1]].count("data") > 1 else doc["data"]


def streamed(raw: bytes, size: int, cap: int = 1 << 20) -> object:
    cut = [raw[i : i + size] for i in range(0, len(raw), size)]
    try:
        return list(JS.array_elements(cut, "doc.json", "data", cap, "article"))
    except JS.NotJson as e:
        return str(e)
    except JS.WrongShape:
        return "shape"


def mutants(n: int, seed: int = 0) -> list[bytes]:
    """``DOC`` with 1-3 bytes deleted, inserted (JSON's own characters, invalid UTF-8, controls), cut short or
    repeated: faults in every part of its structure and its values (seeded: the same cases every run)."""
    rng = random.Random(seed)
    inserts = [b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b" ", b"x", b"\xff", b"\xe2\x82", b"\n", b"1", b"\x01"]
    out = []
    for _ in range(n):
        r = bytearray(DOC)
        for _ in range(rng.randint(1, 3)):
            i, op = rng.randrange(len(r) + 1), rng.random()
            if op < 0.35 and r:
                del r[i % len(r)]
            elif op < 0.8:
                r[i:i] = rng.choice(inserts)
            elif op < 0.9:
                del r[i:]
            else:
                j = rng.randrange(len(r) + 1)
                r[i:i] = r[min(i, j) : max(i, j)]
        out.append(bytes(r))
    return out


def test_any_bytes_end_as_json_loads_of_the_whole_file_however_they_are_cut():
    cases = [DOC, b"", b" \n", b"[]", b"{}", b'{"data": 5}', b'{"data": [1, 2]} x', b'"s"', *mutants(400)]
    outcomes = set()
    for raw in cases:
        expected = whole(raw)
        outcomes.add(expected.split(":")[0] if isinstance(expected, str) else "read")
        for size in (1, 5, 4096):  # every byte its own chunk, odd cuts, all at once
            assert streamed(raw, size) == expected, (raw, size)
    assert outcomes == {"read", "shape", "JSONDecodeError", "UnicodeDecodeError"}  # all four are tried


def test_keys_in_any_order_white_space_and_a_byte_order_mark():
    articles = json.loads(DOC)["data"]
    later = json.dumps({"extra": [], "data": articles, "version": "1.1"}).encode()
    assert streamed(later, 7) == articles
    assert streamed(b"\xef\xbb\xbf \r\n\t" + DOC + b"\n\n", 2) == articles  # json.loads refuses the BOM
    assert streamed(b'{"data": []}', 3) == [] and streamed(b'{"version": 1, "data" : [ ] }', 1) == []


def test_a_document_of_another_shape_is_told_once_read_to_its_end():
    for raw, why in [
        (b'{"data": [], "data": []}', "'data' is given twice"),
        (b'{"data": {"a": 1}}', ""),
        (b'{"version": "1.1"}', ""),
        (b"[1, 2]", ""),
    ]:
        with pytest.raises(JS.WrongShape) as e:
            list(JS.array_elements([raw], "doc.json", "data", 1 << 20, "article"))
        assert str(e.value) == why
    # A JSON error after the wrong shape is told first, as json.loads of the whole file tells it.
    assert streamed(b'{"data": 5, "x": tru}', 4) == whole(b'{"data": 5, "x": tru}')


def test_a_value_over_the_cap_is_refused_naming_it_and_its_byte_offset():
    big = json.dumps({"data": [{"t": "a"}, {"t": "b" * 5000}, {"t": "c"}], "version": "1.1"}).encode()
    with pytest.raises(InputError) as e:
        list(
            JS.array_elements([big[i : i + 100] for i in range(0, len(big), 100)], "big.json", "data", 4096, "article")
        )
    at = big.index(b'{"t": "bb')
    assert str(e.value) == (
        f"cannot read big.json: article 1 (at byte {at}) holds more than 4096 bytes, the cap on one record "
        "(MAX_RECORD_BYTES): is the file what it says it is? (split the record to read it)"
    )
    long_version = b'{"version": "' + b"v" * 5000 + b'", "data": []}'
    with pytest.raises(InputError, match=r"big\.json: the value of 'version' \(at byte 12\) holds more than 4096"):
        list(JS.array_elements([long_version], "big.json", "data", 4096, "article"))
    assert len(streamed(big, 100, cap=len(big))) == 3  # the cap is on one value, not the file
