"""Rule-based sentence segmentation of one paragraph: character spans, no text lost.

Design: one compiled regex finds candidate ends -- a run of terminators (``. ! ? …`` or CJK ``。！？；``)
that starts a run, optional closing quotes/brackets, then whitespace (CJK: whitespace optional) -- and a
cheap decision per candidate looks at the token before the terminator and the first character (rarely
the first word) after the whitespace. Decimals, URLs and inner dots ("3.5", "U.S.-led", "a.b@c.org")
are never candidates because no whitespace follows the dot. A candidate must start a terminator run
(the lookbehind), so each run and its closers are scanned once: linear time even over megabytes of
dots, quotes or unterminated text.

A Latin boundary always falls on whitespace. A CJK terminator (``。！？；``, with its closing quotes and
brackets ``”’」』）``) may be followed directly by the next sentence; cutting there is still safe for the
pipeline because BERT's basic tokenizer splits CJK characters and punctuation into tokens of their own. It
is not cut when CJK punctuation that cannot open a sentence follows (``“快跑！”，他喊道``).

``benchmarks/segmenter_eval.py`` measures boundary F1 on gold news and fiction text (MRPC, CoNLL-2003,
BERT's sample_text) and speed on the shared Wikipedia paragraphs: F1 0.997 overall (>= 0.996 on each
source) at about 55 MB/s per core, 3-4x blingfire's speed. That is this module, the reference; the pipeline
segments whole batches with :mod:`bertstream.pipelines.pretraining.segment` (a compiled scan, the same
sentences, about twice the speed: ``benchmarks/stage_speed.py``).
"""

from __future__ import annotations

import re

__all__ = ["sentence_spans", "split_sentences"]

_TERMINATORS = ".!?…。！？；"
# Chinese ends: full stop, exclamation, question and the full-width semicolon, which closes a clause as
# a full sentence in Chinese prose (Chinese-BERT-wwm and UER split on it too).
_CJK_TERMINATORS = frozenset("。！？；")
# After a CJK end and its closers, these continue the sentence: "“快跑！”，他喊道", "“好！”、“对！”".
_CJK_CONTINUES = frozenset("，、：；,;:)")
# Closers may trail a terminator: 'said "Stop." Then', '(See above.) Next', '。」'.
_CLOSERS = "\"'”’»)\\]}›」』）"

# What a CJK candidate may end with when no whitespace follows (the regex's last lookbehind).
_CJK_ENDS = "。！？；」』）”’"

# group 1: terminator run (the lookbehind makes it start a run, so a long run of dots is scanned once);
# group 2: closers; then an optional page citation that WikiExtractor leaves after the stop
# ("... alphabet.:435 The"); group 3: whitespace -- absent only after a CJK terminator/closer.
_CANDIDATE = re.compile(
    rf"([{_TERMINATORS}](?<![{_TERMINATORS}]{{2}})[{_TERMINATORS}]*)([{_CLOSERS}]*)"
    rf"(?::[0-9xvi]+(?:[,–-][0-9]+)*(?=\s))?"
    rf"(?:(\s+)|(?<=[{_CJK_ENDS}]))"
)
_NONSPACE = re.compile(r"\S")
# The first word after a candidate, past opening quotes/brackets.
_NEXT_WORD = re.compile(r"[\"'“‘(\[«]*([^\W\d_]+)")
# Stripped from the front of the token before a terminator: openers, dashes ("—A. A. Milne") and
# the ".:" of "Euler.:p. 196".
_TOKEN_PREFIX = "\"'“‘([{«‹「『（.:;,—–"

# Lowercased abbreviations, by how they behave before the next word (the standard news/encyclopedic
# lists: titles and ranks, months, US states, company suffixes, Latin and bibliographic abbreviations).
# Titles precede a name: never a sentence end when used as a title (capitalised).
_TITLES = frozenset(
    "mr mrs ms messrs mmes mme mlle dr drs prof profs gen gens gov govs sen sens rep reps rev hon "
    "pres supt insp det fr msgr atty amb ald adm capt cmdr cdr col cpl cpt lt lieut maj sgt pfc pvt spc "
    "brig cmdt".split()
)
# Precede a number ("No. 5", "pp. 23", "Vol. II"); elsewhere "no", "art" are ordinary words.
_BEFORE_NUMBER = frozenset(
    "no nos nr pp p vol vols fig figs art ch chs chap col cols sec sect para op pt pts ex eq min".split()
)
# Almost never end a sentence.
_NEVER_FINAL = frozenset("vs v cf viz ca approx e.g i.e eg ie esp incl resp var subsp ssp cv adv".split())
# Usually end a sentence when a capitalised word follows ("... of Acme Inc. Federal regulators",
# "... in Hartford, Conn. Police said": mid-sentence, AP style puts a comma after a state), unless
# that word continues the name or gives a date ("Co. Ltd.", "Acme Inc. Tuesday said").
_OFTEN_FINAL = frozenset("etc inc corp co ltd llc plc".split())
_STATES = frozenset(
    "Ala Ariz Ark Calif Colo Conn Del Fla Ga Ill Ind Kan Kans Ky La Md Mass Mich Minn Miss Mo Mont "
    "Neb Nebr Nev Okla Ore Pa Penn Tenn Tex Va Vt Wash Wis Wisc Wyo".split()
)  # AP style; capitalised only, since "mass", "wash", "ill" are words
_CONTINUATIONS = frozenset(
    "Inc Corp Co Ltd Llc Plc AG SA NV BV GmbH KG SpA Monday Tuesday Wednesday Thursday Friday "
    "Saturday Sunday January February March April May June July August September October November "
    "December Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()
)
# Can end a sentence or sit inside one ("U.S. Army" / "... in the U.S. The"): a boundary only when
# the next word is a common sentence opener.
_AMBIGUOUS = frozenset(
    "jr sr bros esq al st ave blvd rd hwy mt ft dept univ assn intl govt misc est a.m p.m "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues thu thur thurs fri".split()
)
# Capitalised function words that open sentences and are not names.
_OPENER_WORDS = frozenset(
    "The A An He She It They We I You His Her Its Their Our My Your This That These Those There Here "
    "In On At By For From With Without After Before During Under Over Into Since Until Upon Among "
    "But And Or So Yet Nor However Meanwhile Moreover Furthermore Also As If When While Although "
    "Though Because Then Now Some Many Most All Both Each Every Any Several Few No Not Other Such What "
    "Which Who Whom Whose Where Why How According Despite Still Even Only Instead Thus Hence "
    "Later Earlier Today Yesterday Tomorrow Last Next First Finally To Like Unlike Once Whether "
    "Perhaps Between Following Through Within Against Across Along Around Indeed Nevertheless "
    "Nonetheless Similarly Therefore Overall Again Another Neither Either Much More Two Three".split()
)
# Lowercase one-letter abbreviations: versus; page, circa, born, died, reigned, note, following.
_LETTER_ABBREVIATIONS = {"v": "never", "p": "number"} | dict.fromkeys("cbdrnf", "ambiguous")
_OPENERS_AFTER_INITIAL = _OPENER_WORDS - {"A", "I"}  # "A. A. Milne", "J. I. Packer"
_ROMAN = re.compile(r"[IVXLC]+\b")
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]\Z")  # U.S, e.g, Ph.D, a.m


def _kinds_by_spelling() -> dict[str, str]:
    """Kind of every multi-letter abbreviation as spelled in text ("etc", "Etc", "ETC"; titles and
    states capitalised only), so that a plain alphabetic token is classified by one lookup."""
    kinds: dict[str, str] = {}
    for words, kind in (
        (_AMBIGUOUS, "ambiguous"),
        (_OFTEN_FINAL, "often_final"),
        (_BEFORE_NUMBER, "number"),
        (_NEVER_FINAL, "never"),
    ):  # later groups win, as in the order of the checks they replace
        for w in words:
            for spelling in (w, w.capitalize(), w.upper()):
                kinds[spelling] = kind
    kinds |= dict.fromkeys(_STATES, "often_final")
    kinds |= {w.capitalize(): "title" for w in _TITLES}
    return kinds


_KINDS = _kinds_by_spelling()


def sentence_spans(paragraph: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``paragraph``, in order.

    Spans are whitespace-trimmed, never overlap, and together cover every non-whitespace character
    exactly once. A paragraph of only whitespace has no sentences.
    """
    return _segment(paragraph, True)


def split_sentences(paragraph: str) -> list[str]:
    """The sentences of ``paragraph`` as trimmed strings (see ``sentence_spans``). Whole batches of
    documents: :func:`bertstream.pipelines.pretraining.segment.split_documents` (compiled, same sentences)."""
    return _segment(paragraph, False)


def _segment(p: str, spans: bool) -> list:
    """The sentences of paragraph ``p`` (``spans``: their spans): the reference segmentation."""
    out: list = []
    append = out.append
    first = _NONSPACE.search(p)
    if first is None:
        return out
    n = len(p)
    start = first.start()
    # "(" still open before a candidate: only a rule further down _is_boundary asks, so the ends of the
    # candidates passed are kept and the brackets between them counted when it does (same counts, same
    # order, the same floor at 0 at each candidate as counting at every one).
    parens = "(" in p
    pending: list[int] = []
    depth = 0
    scanned = start
    for m in _CANDIDATE.finditer(p, start):
        term, closers, ws = m.groups()
        at, nxt_at = m.start(), m.end()
        if nxt_at >= n:
            break  # the paragraph's last candidate: it ends the paragraph, cut or not
        if term[0] in _CJK_TERMINATORS:
            cut = p[nxt_at] not in _CJK_CONTINUES  # a CJK end is an end, space or not
        elif ws is None:
            continue  # '."X' with no space is never cut
        elif term == "." and p[nxt_at].isupper():
            # The common case, _is_boundary's first steps inlined: a capital after a plain word.
            lo = at - 48 if at > 48 else 0
            space = p.rfind(" ", lo, at)
            tok = p[space + 1 : at]
            if (space >= 0 or lo == 0) and len(tok) > 1 and tok.isalpha() and tok not in _KINDS:
                cut = True
            else:
                cut = _is_boundary(p, at, term, closers, nxt_at, start, False)  # a capital: brackets moot
        else:
            if parens:
                for end in pending:
                    depth = max(0, depth + p.count("(", scanned, end) - p.count(")", scanned, end))
                    scanned = end
                pending.clear()
                end = m.end(2)
                depth = max(0, depth + p.count("(", scanned, end) - p.count(")", scanned, end))
                scanned = end
            cut = _is_boundary(p, at, term, closers, nxt_at, start, depth > 0)
        if parens and scanned < m.end(2):
            pending.append(m.end(2))
        if cut:
            stop = nxt_at if ws is None else m.start(3)
            append((start, stop) if spans else p[start:stop])
            start = nxt_at
    stop = len(p.rstrip())
    append((start, stop) if spans else p[start:stop])
    return out


def _is_boundary(text: str, at: int, term: str, closers: str, nxt_at: int, sent_start: int, in_parens: bool) -> bool:
    """Whether the candidate terminator ``term`` at ``at`` ends a sentence."""
    nxt = text[nxt_at]
    if in_parens and not nxt.isupper():
        # Inside an open bracket only a capital starts a sentence: "(1 Sam. 5:1-6)", "(Gr. "koile")".
        return False
    if nxt.islower():
        # Lowercase after a real end is rare and then usually a word like "iPhone" or "mRNA".
        if term != "." or not _camel_case_at(text, nxt_at):
            return False
        return _token_kind(text, at, sent_start) == "word"
    if nxt in ",;:)]}.":
        return False  # "etc.)", or the middle of a spaced ellipsis ". . ."
    if nxt == "(" and text[nxt_at + 1 : nxt_at + 2].isdigit():
        return False  # a conversion or citation: "3 lbs. (1.4 kg)", "et al. (2013)"
    if term != ".":
        if ("." in term or "…" in term) and text[at - 1 : at].isspace() and not _after_end(text, at):
            # A spaced " ... " usually marks an omission inside a quote; "word..." trails off, and
            # "end. ... Next" follows a sentence end.
            return _opener_follows(text, nxt_at, _OPENER_WORDS)
        return True  # ? ! ?! ... before a capital, digit or opening quote
    kind = _token_kind(text, at, sent_start)
    if kind == "word":
        return True
    if kind in ("list", "never"):
        return False
    if closers:
        # '... for Acme Inc." Then' / '(U.S.) Next': the quote or bracket closed first; but not
        # before a number or bracket ('"c." 1114', '"et al." (2013)').
        return nxt.isupper() or (nxt in "\"“'‘" and text[nxt_at + 1 : nxt_at + 2].isupper())
    if kind == "title":
        return False
    if kind == "number":
        return not (nxt.isdigit() or _ROMAN.match(text, nxt_at))
    if kind == "often_final":
        # Tickers and brackets follow company names: "Acme Inc. (ACME)", "Acme Inc. ACME.N".
        m = _NEXT_WORD.match(text, nxt_at)
        if m is None or m.start(1) != nxt_at + (nxt == '"'):
            return False
        word, after = m.group(1), m.end()
        if text.startswith(".", after) and not text[after + 1 : after + 2].isspace():
            return False
        return word[0].isupper() and word not in _CONTINUATIONS
    if kind == "initial":  # 'J. R. "Bob" Dobbs'
        return _opener_follows(text, nxt_at, _OPENERS_AFTER_INITIAL)
    if nxt == '"' and text[nxt_at + 1 : nxt_at + 2].isupper():
        return True  # '... economist at I.D.E.A. "Singapore stands to benefit'
    return _opener_follows(text, nxt_at, _OPENER_WORDS)  # ambiguous or a spaced ellipsis


def _token_kind(text: str, at: int, sent_start: int) -> str:
    """Classify the whitespace-delimited token that ends right before the terminator at ``at``."""
    lo = at - 48 if at > 48 else 0
    space = text.rfind(" ", lo, at)
    if space >= 0 or lo == 0:  # fast path: a plain word after a space ("Inc", "Mr", "dog")
        tok = text[space + 1 : at]
        if len(tok) > 1 and tok.isalpha():
            return _KINDS.get(tok, "word")
    chunk = text[lo:at]
    parts = chunk.rsplit(None, 1)
    if not parts or chunk[-1].isspace():
        # A lone "." after a space: the end of a spaced ellipsis ". . ." or a stray '" .'.
        return "ellipsis" if chunk.endswith(". ") else "word"
    tok = parts[-1]
    if len(parts) == 1 and lo > 0:
        return "word"  # a token longer than the window: a URL, a path, never an abbreviation
    w = tok.lstrip(_TOKEN_PREFIX)
    if not w:
        return "word"
    if w.isdigit():
        # "1. Introduction": a short number opening its sentence is a list marker.
        return "list" if len(w) <= 2 and at - len(w) == sent_start else "word"
    cut = max(w.rfind("-"), w.rfind("/"))
    if cut >= 0:  # "then-Gov.", "post-Sept. 11", "Minneapolis-St. Paul", "PeopleSoft/J.D."
        w = w[cut + 1 :]
        if len(w) < 2:
            return "word"  # "km/h.", "Type-C."
    if len(w) == 1:
        if w.isupper():
            return "initial"
        if w in _LETTER_ABBREVIATIONS:
            return _LETTER_ABBREVIATIONS[w]
        return "word"  # a unit or a variable: "35 t.", "4000 m."
    low = w.lower()
    if low in _TITLES and w[0].isupper() and not w.isupper():  # "Ms" but not "MS"
        return "title"
    if low in _NEVER_FINAL:
        return "never"
    if low in _BEFORE_NUMBER:
        return "number"
    if low in _OFTEN_FINAL or w in _STATES:
        return "often_final"
    if low in _AMBIGUOUS:
        return "ambiguous"
    if "." in w and _DOTTED.match(w):
        return "ambiguous"
    return "word"


def _after_end(text: str, at: int) -> bool:
    """Whether the last non-space character before ``at`` ends a sentence ("end. ...")."""
    j = at - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    return j >= 0 and text[j] in ".!?"


def _opener_follows(text: str, at: int, openers: frozenset[str]) -> bool:
    """Whether the word at ``at`` is a sentence opener (and not itself an abbreviation: "No. 1")."""
    m = _NEXT_WORD.match(text, at)
    return m is not None and m.group(1) in openers and not text.startswith(".", m.end())


def _camel_case_at(text: str, at: int) -> bool:
    """'iPhone', 'eBay', 'mRNA': a lowercase-initial word with a capital inside it."""
    m = _NEXT_WORD.match(text, at)
    return m is not None and not m.group(1).islower()
