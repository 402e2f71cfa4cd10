"""Sentence candidates of a document's paragraphs, compiled: the scan and the common decisions of
:func:`bertstream.pipelines.pretraining.segmenter.sentence_spans`, its pure-Python reference.

The reference runs ``_CANDIDATE`` (a regex) over each paragraph and decides every candidate in Python, ~1 us
each: most of segmentation's time. Here one pass over the document's code points finds the same matches
(the regex's backtracking written out: terminator run, closers, optional page citation, then whitespace, or
else the CJK look-behind, tried at shorter closers and runs as the regex backtracks), keeps the bracket depth,
and decides what needs no Python: CJK ends, ``'."X'`` without a space (never cut), and the common capital
after a plain word (cut, unless the word may be an abbreviation: its hash is among those of the
abbreviations, then Python decides, as it does every other candidate). A hash collision only sends a
candidate to Python, which decides it exactly.

Each paragraph is scanned up to its own end, as the reference sees it alone: nothing crosses a seam.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SPACE, UPPER, ALPHA, TERM, CLOSER, CJK_END, CJK_TERM, CJK_CONT, LOWER, DIGIT, PREFIX = (1 << i for i in range(11))

# Candidate codes.
SKIP, NO_CUT, CUT, PYTHON = 0, 1, 2, 3

_COLON, _DOT, _SPACE_CP, _OPEN, _CLOSE = ord(":"), ord("."), ord(" "), ord("("), ord(")")
_ELLIPSIS, _HYPHEN, _SLASH = ord("…"), ord("-"), ord("/")
_NOT_AFTER_END = np.array([ord(c) for c in ",;:)]}."], np.uint32)  # the reference's nxt in ",;:)]}."
_DASHES = (ord(","), ord("–"), ord("-"))


@njit(cache=True)
def token_hash(cp, lo, hi):
    """FNV-1a over code points ``cp[lo:hi]`` (64-bit)."""
    h = np.uint64(0xCBF29CE484222325)
    for k in range(lo, hi):
        h = (h ^ np.uint64(cp[k])) * np.uint64(0x100000001B3)
    return h


@njit(cache=True)
def _has(sorted_hashes, h):
    """Whether ``h`` is in ``sorted_hashes`` (binary search)."""
    lo, hi = 0, len(sorted_hashes)
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_hashes[mid] < h:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(sorted_hashes) and sorted_hashes[lo] == h


@njit(cache=True)
def _is_citation_char(c):
    return (48 <= c <= 57) or c == 120 or c == 118 or c == 105  # [0-9xvi]


@njit(cache=True)
def _match_at(cp, props, j, ps, pe):
    """The regex's match at ``j`` (a terminator that starts its run) up to the paragraph's end ``pe``:
    ``(run_end, closers_end, ws_start, end)``, ``ws_start`` -1 when no whitespace follows; ``end`` -1: none."""
    r = j + 1
    while r < pe and props[cp[r]] & TERM:
        r += 1
    c = r
    while c < pe and props[cp[c]] & CLOSER:
        c += 1
    e = c
    if c < pe and cp[c] == _COLON:  # (?::[0-9xvi]+(?:[,–-][0-9]+)*(?=\s))?: all or nothing
        k = c + 1
        while k < pe and _is_citation_char(cp[k]):
            k += 1
        if k > c + 1:
            while k + 1 < pe and (cp[k] == _DASHES[0] or cp[k] == _DASHES[1] or cp[k] == _DASHES[2]):
                if not (48 <= cp[k + 1] <= 57):
                    break
                k += 2
                while k < pe and 48 <= cp[k] <= 57:
                    k += 1
            if k < pe and props[cp[k]] & SPACE:
                e = k
    if e < pe and props[cp[e]] & SPACE:
        w = e + 1
        while w < pe and props[cp[w]] & SPACE:
            w += 1
        return r, c, e, w
    # No whitespace: the look-behind alternative, at the closers' end, then at shorter closers and runs.
    for k in range(c, r - 1, -1):
        if props[cp[k - 1]] & CJK_END:
            return r, k, -1, k
    for k in range(r - 1, j, -1):
        if props[cp[k - 1]] & CJK_END:
            return k, k, -1, k
    return r, c, -1, -1


@njit(cache=True)
def _continues(cp, props, nxt, end, pe):
    """Whether the character after the end run continues the sentence: one of ",;:)]}." or "(" before a digit."""
    for c in _NOT_AFTER_END:
        if nxt == c:
            return True
    return nxt == _OPEN and end + 1 < pe and (props[cp[end + 1]] & DIGIT) != 0


@njit(cache=True)
def _lone_dot(cp, props, j, end, ps, pe, bracket_open, kind_hashes, list_hashes):
    """``_is_boundary`` for a lone "." before anything but a lowercase letter: the checks of the character
    after it, then a cut when the token before is a "word" (``_token_kind``)."""
    nxt = cp[end]
    if not props[nxt] & UPPER:
        if bracket_open or _continues(cp, props, nxt, end, pe):
            return NO_CUT
    return _word_before(cp, props, j, ps, kind_hashes, list_hashes)


@njit(cache=True)
def _word_before(cp, props, j, ps, kind_hashes, list_hashes):
    """CUT when ``_token_kind`` of the token before the "." at ``j`` is "word", decided here when that needs
    no abbreviation list or Unicode case mapping; else PYTHON."""
    lo = j - 48 if j - ps > 48 else ps
    space = j - 1
    while space >= lo and cp[space] != _SPACE_CP:
        space -= 1
    if space >= lo or lo == ps:  # _token_kind's first look: a plain word after a space
        tok = space + 1
        if j - tok > 1:
            alpha = True
            for k in range(tok, j):
                if not props[cp[k]] & ALPHA:
                    alpha = False
                    break
            if alpha:
                return PYTHON if _has(kind_hashes, token_hash(cp, tok, j)) else CUT
    # Its second look, as far as it goes without lists: the last whitespace-separated token of the window.
    if j == lo:
        return CUT  # nothing before: "word"
    if props[cp[j - 1]] & SPACE:
        return PYTHON if j - 2 >= lo and cp[j - 2] == _DOT and cp[j - 1] == _SPACE_CP else CUT  # ellipsis
    q = j - 1
    while q >= lo and not props[cp[q]] & SPACE:
        q -= 1
    tok = q + 1
    if lo > ps:  # a window without whitespace inside (leading whitespace aside) holds a long token: "word"
        inner = False
        for k in range(lo, q):
            if not props[cp[k]] & SPACE:
                inner = True
                break
        if not inner:
            return CUT
    w = tok
    while w < j and props[cp[w]] & PREFIX:
        w += 1
    if w == j:
        return CUT  # only openers and dashes: "word"
    digits = True
    for k in range(w, j):
        if not props[cp[k]] & DIGIT:
            digits = False
            break
    if digits:
        return PYTHON if j - w <= 2 else CUT  # a short number may be a list marker: that needs the sentence start
    for k in range(j - 1, w - 1, -1):  # "then-Gov.", "km/h.": the part after the last dash or slash
        if cp[k] == _HYPHEN or cp[k] == _SLASH:
            if j - (k + 1) < 2:
                return CUT
            w = k + 1
            break
    if j - w == 1:
        return PYTHON  # an initial or a one-letter abbreviation
    h = np.uint64(0xCBF29CE484222325)
    for k in range(w, j):
        c = cp[k]
        if c >= 128 or c == _DOT:
            return PYTHON  # Unicode case mapping, or a dotted "U.S": Python's rules
        if 65 <= c <= 90:
            c += 32
        h = (h ^ np.uint64(c)) * np.uint64(0x100000001B3)
    if _has(list_hashes, h) or _has(list_hashes, token_hash(cp, w, j)):
        return PYTHON  # (may be) on a list: title, state, number, never or often final, ambiguous
    return CUT


@njit(cache=True)
def _other_end(cp, props, j, run_end, end, pe, bracket_open):
    """``_is_boundary`` for a run of "?" and "!" (no "." or "…" in it); anything else is left to Python."""
    for k in range(j, run_end):
        if cp[k] == _DOT or cp[k] == _ELLIPSIS:
            return PYTHON
    nxt = cp[end]
    if bracket_open and not props[nxt] & UPPER:
        return NO_CUT
    if props[nxt] & LOWER or _continues(cp, props, nxt, end, pe):
        return NO_CUT
    return CUT


@njit(cache=True)
def scan_document(cp, props, starts, ends, kind_hashes, list_hashes):
    """Candidates of every paragraph ``cp[starts[i]:ends[i]]``, in order, as arrays: position, run end, closers
    end, whitespace start (-1: none), end of the match (the next sentence's start), paragraph, code, whether
    a bracket is open (the reference's ``depth > 0``), and the latest sure cut's end before it (the sentence
    start when no Python cut came between). Also each paragraph's first and (trimmed) last character."""
    cap = 0  # at most one candidate per terminator: arrays sized once, never grown
    for k in range(len(cp)):
        if props[cp[k]] & TERM:
            cap += 1
    out = np.empty((9, cap), np.int64)
    n_cand = 0
    first = np.full(len(starts), -1, np.int64)
    last = np.zeros(len(starts), np.int64)
    for pi in range(len(starts)):
        ps, pe = starts[pi], ends[pi]
        s = ps
        while s < pe and props[cp[s]] & SPACE:
            s += 1
        if s == pe:
            continue  # blank: no sentence
        t = pe
        while props[cp[t - 1]] & SPACE:
            t -= 1
        first[pi], last[pi] = s, t
        sent = s  # the latest sure cut's end
        depth, scanned = 0, s
        j = s
        while j < pe:
            if not props[cp[j]] & TERM or (j > ps and props[cp[j - 1]] & TERM):
                j += 1
                continue
            run_end, clos_end, ws, end = _match_at(cp, props, j, ps, pe)
            if end < 0:
                j += 1
                continue
            if end >= pe:
                break  # the paragraph's last candidate ends it, cut or not
            cjk = props[cp[j]] & CJK_TERM
            if ws < 0 and not cjk:
                j = end  # '."X' with no space is never cut (and leaves the brackets uncounted)
                continue
            opened = 0  # the reference adds a segment's counts, then floors at 0 (not per bracket)
            for k in range(scanned, clos_end):
                if cp[k] == _OPEN:
                    opened += 1
                elif cp[k] == _CLOSE:
                    opened -= 1
            depth = max(0, depth + opened)
            scanned = clos_end
            if cjk:
                code = NO_CUT if props[cp[end]] & CJK_CONT else CUT
            elif run_end == j + 1 and cp[j] == _DOT and not props[cp[end]] & LOWER:
                code = _lone_dot(cp, props, j, end, ps, pe, depth > 0, kind_hashes, list_hashes)
            else:
                code = _other_end(cp, props, j, run_end, end, pe, depth > 0)
            out[0, n_cand] = j
            out[1, n_cand] = run_end
            out[2, n_cand] = clos_end
            out[3, n_cand] = ws
            out[4, n_cand] = end
            out[5, n_cand] = pi
            out[6, n_cand] = code
            out[7, n_cand] = depth > 0
            out[8, n_cand] = sent
            n_cand += 1
            if code == CUT:
                sent = end
            j = end
    return out[:, :n_cand], first, last
