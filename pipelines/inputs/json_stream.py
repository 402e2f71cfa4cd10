"""One JSON document read from a byte stream a value at a time: the elements of the array its top-level object
holds under one key (SQuAD's ``{"version": ..., "data": [article, ...]}``) come out one by one, so that memory
holds one value (up to a cap) and a read-ahead chunk whatever the file's size.

Work is linear in the file: a value's end is found by scanning its bytes once (brackets by regex, a string's end
by ``find`` of its quotes), then the value alone is decoded by ``json``'s own decoder; what is consumed is
dropped from the buffer once it is most of it. Whatever the file holds, the outcome is that of
``json.loads(raw.decode("utf-8"))`` (the whole file read first, as the task readers did), word for word and at the
same line, column and character: invalid UTF-8 anywhere before any JSON error, a JSON error before any shape
error (``WrongShape``, raised once the whole document is read). What differs: a value past the cap is refused
(``files.record_too_big``, naming the element or key and its byte offset), a UTF-8 byte-order mark is skipped
(``json.loads`` refuses it; positions then count from after it), the key given twice is refused (``json.loads``
keeps the last one, which a stream cannot), and an int past Python's digit limit or nesting past its stack ends in
``NotJson`` (``ValueError``/``RecursionError`` with their words).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from bertstream.pipelines.common.files import record_too_big

_BOM = b"\xef\xbb\xbf"
_SPACE = re.compile(rb"[ \t\n\r]*")  # json's own whitespace
_STRUCTURE = re.compile(rb'[\[\]{}"]')  # outside strings: what opens or closes a value
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_SCALAR_END = re.compile(rb"[ \t\n\r,\]}]")
_VALUE_STARTS = frozenset(b'"{[-0123456789ntfNI')  # what json's scanner may start a value with
_COMPOUND_STARTS = frozenset(b'"{[')
_KEY_STARTS = frozenset(b'"')
_DECODER = json.JSONDecoder()


class NotJson(ValueError):
    """The bytes are no JSON document; the message is ``json``'s (or the UTF-8 codec's) own, with its type and the
    position in the whole file: ``JSONDecodeError: Expecting ',' delimiter: line 1 column 9 (char 8)``."""


class WrongShape(ValueError):
    """A JSON document, read to its end, that is no object holding one array under the key (the message says
    more when there is more to say, else it is empty)."""


def array_elements(chunks: Iterable[bytes], path: str, key: str, cap: int, element: str) -> Iterator[Any]:
    """The elements of ``doc[key]``, decoded, one at a time, where ``doc`` is the JSON document whose bytes
    ``chunks`` gives (``path`` names it in messages, ``element`` names one element: "article").

    Raises ``NotJson`` as ``json.loads`` would refuse the document, ``WrongShape`` after its end when it is no
    object with an array under ``key``, and ``InputError`` for a value over ``cap`` bytes.
    """
    return _Reader(chunks, path, cap).elements(key, element)


class _Reader:
    """A buffer over the stream: ``buf[pos:]`` is what is not consumed yet, ``base`` the file offset of ``buf[0]``;
    ``chars``/``lines``/``last_newline`` locate the consumed text as ``json`` counts it (for its messages)."""

    def __init__(self, chunks: Iterable[bytes], path: str, cap: int) -> None:
        self.chunks = iter(chunks)
        self.path, self.cap = path, cap
        self.buf = bytearray()
        self.pos = self.base = 0
        self.eof = False
        self.chars = self.lines = 0
        self.last_newline = -1  # character index of the last newline consumed

    # ------------------------------------------------------------------------------------- the document

    def elements(self, key: str, element: str) -> Iterator[Any]:
        while len(self.buf) < len(_BOM) and self._more():
            pass
        if self.buf.startswith(_BOM):
            self.pos = len(_BOM)
        c = self._peek()
        if c != ord("{"):
            self._value("the top-level value")
            self._end()
            raise WrongShape("")
        self._take_ascii(1)
        found, twice, wrong = False, False, False
        c = self._peek()
        if c == ord("}"):
            self._take_ascii(1)
        else:
            if c != ord('"'):
                self._explain("{")
            while True:
                name = self._value(f"a key (at byte {self.base + self.pos})")
                if self._peek() != ord(":"):
                    self._explain('{""')
                self._take_ascii(1)
                c = self._peek()
                if name == key:
                    twice = found
                    if c == ord("["):
                        yield from self._array(element, yielding=not (twice or wrong))
                    elif not isinstance(self._value(f"the value of {key!r} (at byte {self.base + self.pos})"), list):
                        wrong = True
                    found = True
                else:
                    self._value(f"the value of {name!r} (at byte {self.base + self.pos})")
                if not self._next_member(ord("}"), '{"":[]', _KEY_STARTS):
                    break
        self._end()
        if twice or wrong or not found:
            raise WrongShape(f"{key!r} is given twice" if twice else "")

    def _array(self, element: str, yielding: bool) -> Iterator[Any]:
        self._take_ascii(1)
        if self._peek() == ord("]"):
            self._take_ascii(1)
            return
        index = 0
        while True:
            value = self._value(f"{element} {index} (at byte {self.base + self.pos})")
            if yielding:
                yield value
            index += 1
            if not self._next_member(ord("]"), "[[]", _VALUE_STARTS):
                return

    def _next_member(self, closer: int, context: str, starts: frozenset[int]) -> bool:
        """After a member of an object or array (``context`` in ``json``'s words, for its errors): consume its
        closing ``closer`` (False), or a comma before the start of another member, one of ``starts`` (True)."""
        c = self._peek()
        if c == closer:
            self._take_ascii(1)
            return False
        if c != ord(","):
            self._explain(context)
        comma = self._state()
        self._take_ascii(1)
        if self._peek() not in starts:
            self._explain(context, comma)
        return True

    def _end(self) -> None:
        if self._peek() != -1:
            self._fail("Extra data", self._state(), "", 0)

    # ------------------------------------------------------------------------------------- values

    def _value(self, record: str) -> Any:
        """The value at ``pos`` (no white space before it), decoded and consumed."""
        c, start = self._peek(), self.pos
        if c not in _VALUE_STARTS:
            self._fail("Expecting value", self._state(), "", 0)
        end = self._compound_end(start, record) if c in _COMPOUND_STARTS else self._scalar_end(start, record)
        try:
            text = self.buf[start:end].decode("utf-8")
        except UnicodeDecodeError as e:
            self._drain()  # the error as the whole file's decoding finds it (its reason may need what follows)
            raise NotJson(_utf8_error(e, self.base + start)) from None
        try:
            value, n = _DECODER.raw_decode(text)
        except json.JSONDecodeError as e:
            self._fail(e.msg, self._state(), text, e.pos)
        except (ValueError, RecursionError) as e:  # an int past Python's digit limit; nesting past the stack
            self._drain()
            raise NotJson(f"{type(e).__name__}: {e}") from None
        self._take(end - start if n == len(text) else len(text[:n].encode("utf-8")), text[:n])
        return value

    def _compound_end(self, start: int, record: str) -> int:
        """Where the object, array or string at ``start`` ends (just after its closing bracket or quote), found by
        its brackets outside strings; the end of the file when it does not end (``json`` then names the fault)."""
        depth, i, in_string = 0, start, False
        while True:
            buf = self.buf
            if in_string:
                j = _closing_quote(buf, i)
                if j >= 0:
                    in_string, i = False, j + 1
                    if depth == 0:
                        return self._checked(start, i, record)
                    continue
                i = len(buf)
            else:
                m = _STRUCTURE.search(buf, i)
                if m is not None:
                    i, token = m.end(), buf[m.start()]
                    if token == _QUOTE:
                        in_string = True
                        continue
                    depth += 1 if token in b"[{" else -1
                    if depth == 0:
                        return self._checked(start, i, record)
                    continue
                i = len(buf)
            self._checked(start, i, record)
            if not self._more():
                return len(self.buf)

    def _scalar_end(self, start: int, record: str) -> int:
        """Where the number or literal at ``start`` ends: at white space, ``,``, ``]``, ``}`` or EOF."""
        i = start
        while True:
            m = _SCALAR_END.search(self.buf, i)
            if m is not None:
                return self._checked(start, m.start(), record)
            i = self._checked(start, len(self.buf), record)
            if not self._more():
                return len(self.buf)

    def _checked(self, start: int, end: int, record: str) -> int:
        if end - start > self.cap:
            raise record_too_big(self.path, record, self.cap)
        return end

    # ------------------------------------------------------------------------------------- the buffer

    def _more(self) -> bool:
        """Read the next chunk into the buffer; False at the end of the stream."""
        for chunk in self.chunks:
            if chunk:
                self.buf += chunk
                return True
        self.eof = True
        return False

    def _peek(self) -> int:
        """Consume white space; the byte that follows (-1 at the end of the file)."""
        while True:
            end = _SPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if end > self.pos:
                self._take_ascii(end - self.pos)
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return -1

    def _take_ascii(self, n: int) -> None:
        self._take(n, self.buf[self.pos : self.pos + n].decode("ascii"))

    def _take(self, n: int, text: str) -> None:
        """Consume ``n`` bytes, ``text`` decoded; once the consumed part is most of the buffer, drop it (each
        byte is moved at most once on average: linear)."""
        newlines = text.count("\n")
        if newlines:
            self.lines += newlines
            self.last_newline = self.chars + text.rindex("\n")
        self.chars += len(text)
        self.pos += n
        if self.pos > len(self.buf) // 2:
            del self.buf[: self.pos]
            self.base += self.pos
            self.pos = 0

    def _state(self) -> tuple[int, int, int]:
        return self.chars, self.lines, self.last_newline

    # ------------------------------------------------------------------------------------- errors

    def _explain(self, context: str, comma: tuple[int, int, int] | None = None) -> None:
        """A fault of the document's structure at ``pos`` (after ``context``, and a comma when ``comma`` gives
        where it was): ``json``'s own words for it, from ``json.loads`` of the context and the next character
        (what it decides on: its words differ between Python versions)."""
        head = self.buf[self.pos : self.pos + 4].decode("utf-8", "replace")[:1]
        stub = context + ("," if comma is not None else "")
        try:
            json.loads(stub + head)
        except json.JSONDecodeError as e:
            if comma is not None and e.pos == len(stub) - 1:  # at the comma itself ("Illegal trailing comma")
                self._fail(e.msg, comma, ",", 0)
            self._fail(e.msg, self._state(), head, max(0, e.pos - len(stub)))
        self._fail(f"Unexpected {head!r}", self._state(), head, 0)  # (json.loads found no fault: never seen)

    def _fail(self, msg: str, state: tuple[int, int, int], text: str, at: int) -> None:
        """Raise ``json``'s error ``msg`` at character ``at`` of ``text``, which starts where ``state`` was taken:
        after any invalid UTF-8 in the rest of the file, which decoding the whole file would have found first."""
        self._drain()
        chars, lines, last_newline = state
        k = text.rfind("\n", 0, at)
        line = lines + text.count("\n", 0, at) + 1
        column = at - k if k >= 0 else chars + at - last_newline
        raise NotJson(f"JSONDecodeError: {msg}: line {line} column {column} (char {chars + at})")

    def _drain(self) -> None:
        """Decode the rest of the file from ``pos`` (not consuming the buffer): the first invalid UTF-8 in it
        raises ``NotJson`` with the codec's words and its position in the file."""
        offset, pending = self.base + self.pos, b""
        pieces = [bytes(self.buf[self.pos :])]
        while pieces or not self.eof:
            piece = pieces.pop() if pieces else next(self.chunks, None)
            if piece is None:
                self.eof = True
                break
            data = pending + piece
            try:
                data.decode("utf-8")
                pending = b""
            except UnicodeDecodeError as e:
                if e.reason != "unexpected end of data":
                    raise NotJson(_utf8_error(e, offset)) from None
                pending = data[e.start :]  # a character cut by the chunk: completed by the next one
            offset += len(data) - len(pending)
        try:
            pending.decode("utf-8")
        except UnicodeDecodeError as e:
            raise NotJson(_utf8_error(e, offset)) from None


def _closing_quote(buf: bytearray, i: int) -> int:
    """Where the string that ``buf[i]`` is inside of ends: its first quote from ``i`` after an even number of
    backslashes (-1: not in ``buf``). Quotes are found by ``find`` (memchr); each backslash is counted once."""
    while True:
        j = buf.find(b'"', i)
        if j < 0:
            return -1
        k = j
        while buf[k - 1] == _BACKSLASH:  # stops at the string's opening quote at the latest
            k -= 1
        if (j - k) % 2 == 0:
            return j
        i = j + 1


def _utf8_error(e: UnicodeDecodeError, offset: int) -> str:
    """The codec's message for ``e``, its position moved by ``offset`` (that of ``e.object`` in the file)."""
    start, end = offset + e.start, offset + e.end
    where = (
        f"byte 0x{e.object[e.start]:02x} in position {start}"
        if end - start == 1
        else f"bytes in position {start}-{end - 1}"
    )
    return f"UnicodeDecodeError: 'utf-8' codec can't decode {where}: {e.reason}"
