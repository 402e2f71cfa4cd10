"""Wikitext -> the article's prose as plain-text paragraphs, fast: a few regex scans and bracket matchers.

``wikitext_paragraphs(text)`` keeps what a reader sees as running text and drops everything else:

- Removed with their content: templates ``{{...}}`` (nested; infoboxes, citations, parser functions), tables
  ``{| ... |}`` (nested), comments, ``<ref>`` (paired and ``<ref .../>``), file, image and category links
  (captions with links inside included), interlanguage links (``[[de:...]]``), behaviour switches
  (``__TOC__``) and the content of tags that hold no prose: ``math``, ``chem``, ``gallery``, ``timeline``,
  ``score``, ``syntaxhighlight``, ``source``, ``pre``, ``imagemap``, ``references``, ``includeonly``, ...
  (``DROPPED_TAGS``). Formulas leave a gap in their sentence, as with both libraries below.
- Lines that are not prose: headings (``== x ==``), list items and indented lines (``*``, ``#``, ``;``,
  ``:``), table rows left by templates that open tables (``|``, ``!``), rules (``----``), and preformatted
  lines (a space first in the source: code, ASCII art). Such a line ends the paragraph it follows, as a blank
  line does.
- Kept as text: the inner text of every other HTML tag (``b``, ``i``, ``span``, ``sub``, ``sup``, ``small``,
  ``blockquote``, ``poem``, ...) and of ``code``: inline code is a word of its sentence ("the <code>ls</code>
  command"), while code blocks are in ``syntaxhighlight``, ``source`` or ``pre`` (dropped). ``<br>`` is a
  space; a block-level tag (``blockquote``, ``div``, ``p``, ...) at a line's start or end also ends the
  paragraph there. Links show their label (``[[a|b]]`` -> ``b``, ``[[a]]s`` -> ``as``, the pipe trick
  ``[[a (b)|]]`` -> ``a``; the target when the label was only a template), external links
  ``[http://x label]`` their label; bare URLs and unlabelled external links go. Bold and italic quotes go
  (keeping the apostrophe MediaWiki reads out of them: ``''Iliad'''s`` -> ``Iliad's``), HTML entities are
  resolved, whitespace (NBSP included) is collapsed to single spaces, and empty parentheses and separators
  left by removed templates go (``Achilles ({{IPA|..}}; {{lang|..}}, Akhilleus, )`` -> ``Achilles (Akhilleus)``).

Paragraphs are the blocks between blank lines after the removals (a line left empty by them counts as
blank); the lines of one paragraph are joined with a space. A paragraph with no letter or digit is dropped.

Why a scanner, and which library checks it. Measured by ``benchmarks/wikipedia_pipeline.py --wikitext`` on the shared
dump's 106 articles (5.75 MB of wikitext), one thread, best of 3-5, on 2 cores shared with a training job
(load 2.5-5: the figures move between runs, the ratios less): this module 9-18 MB/s, wikitextparser's
``plain_text`` 1.1-1.3 MB/s (8-13x slower), mwparserfromhell's ``strip_code`` 0.5-0.9 MB/s (14-22x slower, its
C tokenizer in use). Neither library's text is training text as it is: both keep list items, headings, table
cells, captions and category names (28-31% more words than the prose). So the libraries serve as the tests'
oracle, not at run time, and no page needs one as a fallback: every input is handled, in time linear in its
length (each scan and bracket matcher looks at a character a bounded number of times, and never recurses),
which the tests check on hostile inputs.

The oracle is wikitextparser (the ``test`` extra): it was the faster of the two, its ``plain_text`` keeps the
line structure (``== x ==``, ``*``), so our paragraph rules apply to its output unchanged, and its parse of
every article agrees with ours (word-level F1 0.99998 on average, 0.9987 at worst). mwparserfromhell's text
has to be rebuilt from its node tree, and that tree mis-nests real articles: an italic run it carries across
lines swallows Anarchism's later headings, a malformed table the rest of Alaska (F1 0.988 on average, 17
articles below 0.99). wikitextparser is GPLv3: fine for a test dependency, which is all it is here.

Not handled (as neither library does): templates are not expanded, so text a template would print
(``{{convert|5|km}}``, ``{{lang|fr|...}}``) is missing from its sentence; ``<nowiki>`` content is read as
markup. Link prefixes are English (``file``, ``image``, ``category``) unless ``hidden_namespaces`` names a
wiki's own (its ``<namespaces>`` names 6 and 14, lower-cased).
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

# Lower-case link prefixes whose links show nothing in the text (images and categories).
DEFAULT_HIDDEN_NAMESPACES = frozenset({"file", "image", "category"})

# Tags whose content is no prose: dropped with it.
DROPPED_TAGS = (
    "ref references math chem ce gallery timeline score syntaxhighlight source pre imagemap graph mapframe maplink "
    "hiero templatedata templatestyles inputbox categorytree charinsert includeonly indicator section"
).split()
# HTML tags MediaWiki allows in wikitext (and its own transparent ones): the tags go, their text stays. Any
# other "<name" is text, as MediaWiki shows it.
INLINE_TAGS = (
    "b i u s strike del ins big small sub sup span font code tt kbd var samp q em strong dfn mark abbr cite bdi "
    "bdo ruby rb rp rt rtc data time wbr nowiki onlyinclude noinclude"
).split()
# Block-level tags go too; at a line's start or end they also end the paragraph there, as a blank line does
# (one inside a line keeps that line's kind: a quote in a list item goes with the item).
BLOCK_TAGS = "blockquote div center poem p hr h1 h2 h3 h4 h5 h6 ol ul li dl dt dd table tr td th caption".split()

# Every pattern's open-ended part excludes the character that starts its own construct, so a scan that fails
# stops at the next candidate: no input makes a pattern look at a character more than a bounded number of times.
_COMMENT = re.compile(r"<!--(?:.*?-->|.*)", re.S)  # an unclosed comment hides the rest of the page
_DROPPED_NAMES = "|".join(DROPPED_TAGS)
# A closing tag has no attributes: "</ref name=x>" (a typo seen in real articles) is no end of a ref.
_DROPPED_TAG = re.compile(rf"<(?:/({_DROPPED_NAMES})\s*|({_DROPPED_NAMES})(?=[\s/>])([^<>]*))>", re.I)
_BLOCK = r"</?(?:" + "|".join(BLOCK_TAGS) + r")\b[^<>\n]*>"
_LEADING_BLOCK_TAGS = re.compile(rf"(?:{_BLOCK}\s*)+", re.I)
_BLOCK_TAG = re.compile(_BLOCK, re.I)
_TAG = re.compile(r"</?(?:" + "|".join(INLINE_TAGS + BLOCK_TAGS) + r")\b[^<>]*>", re.I)
_BR = re.compile(r"<br\b[^<>]*>", re.I)
_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}")
# Table delimiters count only at a line's start (a table may be indented with ":"); the text is given a
# leading newline, so that a pattern that starts with a literal finds them all (several times faster than "^").
_TABLE_TOKEN = re.compile(r"\n[\0 \t:]*(\{\||\|\})")
_BLANK_LINE = re.compile(r"\n[\0 \t]*\n")
# A line that starts with a space is preformatted text (MediaWiki's <pre>: code, ASCII art), no prose. It is
# marked in the source, before removals could leave other lines starting with one ("{{x}} Text" -> " Text").
_PRE = "\0"  # no XML 1.0 document holds it
_PREFORMATTED = re.compile(r"\n(?= )")
_LINK_TOKEN = re.compile(r"\[\[|\]\]")
_SIMPLE_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")  # no link inside: most links, replaced in one C-speed pass
# Lower-case schemes only (as written in practice): case-blind patterns scan several times slower.
_EXTERNAL_LINK = re.compile(r"\[(?:https?://|ftp://|//|mailto:|irc://|news:)[^\s\[\]<>]*([ \t][^\[\]\n]*)?\]")
_BARE_URL = re.compile(r"(?:https?|ftp)://[^\s<>\[\]{}|\"]*")
_SWITCH = re.compile(r"__[A-Z]+__")
_QUOTES = re.compile(r"'''''|'''|''")  # a run of four leaves its first quote, as MediaWiki prints it
_QUOTE_RUN = re.compile(r"'{2,}")
# Parentheses that held only templates ("Paris ({{IPA-fr|...}})"), after a space: "f()" in code stays.
_EMPTY_PARENS = re.compile(r" \((?: ?[,;:])* ?\)")
# Separators left at a parenthesis by templates that went: "Achilles (; , Akhilleus, )" -> "(Akhilleus)".
_OPENING_SEPARATORS = re.compile(r" \((?: ?[,;:])+ ?")
# A run is matched from its start only (the look-behind), so a long run of separators is scanned once.
_CLOSING_SEPARATORS = re.compile(r"(?<![ ,;:]) ?[,;:][ ,;:]*\)")
_SEPARATOR_BEFORE_CLOSE = re.compile(r"[,;:] ?\)")  # the cheap test of whether to look at all
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.;:])(?= |$)")
# Interlanguage prefixes: language codes (de, fr, zh-min-nan, simple, be-x-old).
_LANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z]{1,8})*|simple")
_PARENTHETICAL = re.compile(r"\([^()]*\)\s*$")
# Links nest a level or two (a link in an image caption); deeper "[[" lose their brackets only, so that no
# input makes a link's text be copied once per level.
MAX_LINK_DEPTH = 16
_ALNUM = re.compile(r"[^\W_]")


def wikitext_paragraphs(wikitext: str, *, hidden_namespaces: AbstractSet[str] = DEFAULT_HIDDEN_NAMESPACES) -> list[str]:
    """The prose of an article's wikitext as paragraphs, in order (see the module's docstring).

    ``hidden_namespaces``: lower-case link prefixes whose links are dropped with their captions
    (``hidden_namespaces_of`` makes them for a wiki that is not in English).
    """
    text = "\n" + (wikitext.replace(_PRE, "") if _PRE in wikitext else wikitext)
    if "\n " in text:
        text = _PREFORMATTED.sub("\n" + _PRE, text)
    text = _remove_blocks(text)
    text = _replace_links(text, hidden_namespaces)
    if "[" in text:
        text = _EXTERNAL_LINK.sub(_external_label, text)
    if "://" in text:
        text = _BARE_URL.sub("", text)
    if "__" in text:
        text = _SWITCH.sub("", text)
    return [p for p in map(_clean_paragraph, _raw_paragraphs(text)) if p]


def hidden_namespaces_of(namespaces: Mapping[int, str]) -> frozenset[str]:
    """The link prefixes to drop for a wiki with these namespaces (number -> name, as a dump's ``<siteinfo>``
    lists them): its names for files (6) and categories (14), and the English ones, which every wiki accepts."""
    own = {namespaces.get(6, ""), namespaces.get(14, "")}
    return DEFAULT_HIDDEN_NAMESPACES | {name.lower() for name in own if name}


def _remove_blocks(text: str) -> str:
    """Comments, tags dropped with their content, templates and tables: constructs that may span lines."""
    if "<!--" in text:
        text = _COMMENT.sub("", text)
    if "<" in text:
        text = _drop_tag_contents(text)
    if "''" in text:  # before templates: ''{{lang|..}}'' must not leave a run of four quotes (one printed)
        text = _remove_quotes(text)
    if "{{" in text or "}}" in text:
        spans, unclosed = _nested_spans(_TEMPLATE_TOKEN.finditer(text), "{{")
        text = _cut(text, spans + [(start, start + 2) for start in unclosed])  # an unclosed "{{" is text
    if "{|" in text or "|}" in text:
        spans, unclosed = _nested_spans(_TABLE_TOKEN.finditer(text), "{|")
        text = _cut(text, spans + _to_paragraph_end(text, unclosed))
    return text


def _drop_tag_contents(text: str) -> str:
    """Each ``DROPPED_TAGS`` element goes with its content; a self-closing, stray or never-closed tag goes alone.

    Like MediaWiki, the first closing tag of the same name ends an element (these tags do not nest).
    """
    tokens = list(_DROPPED_TAG.finditer(text))
    if not tokens:
        return text
    last_close: dict[str, int] = {}
    for i, m in enumerate(tokens):
        if m.group(1):
            last_close[m.group(1).lower()] = i
    out: list[str] = []
    pos = 0
    i, n = 0, len(tokens)
    while i < n:
        m = tokens[i]
        i += 1
        out.append(text[pos : m.start()])
        pos = m.end()
        name = m.group(2)
        if name is None or m.group(3).endswith("/") or last_close.get(name.lower(), -1) < i:
            continue
        name = name.lower()
        # Skipping tokens up to the close consumes them: each token is looked at once.
        while (tokens[i].group(1) or "").lower() != name:
            i += 1
        pos = tokens[i].end()
        i += 1
    out.append(text[pos:])
    return "".join(out)


def _remove_quotes(text: str) -> str:
    """Bold and italic quotes go; an apostrophe that MediaWiki reads out of them stays (see ``_apostrophe``)."""
    if "'''" not in text:
        return _QUOTES.sub("", text)
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if "'''" in line:
            lines[k] = _apostrophe(line)
    return _QUOTES.sub("", "\n".join(lines))


def _apostrophe(line: str) -> str:
    """MediaWiki's rule for a line with an odd number of both italic and bold quotes: one ``'''`` is an
    apostrophe then italics (``''Iliad'''s`` -> ``Iliad's``): the first after a one-letter word, else the
    first after a longer word, else the first after a space. The line comes back without quotes."""
    italics = bold = 0
    threes: list[re.Match[str]] = []
    for m in _QUOTE_RUN.finditer(line):
        n = len(m.group())
        if n == 3:
            threes.append(m)
        italics += n == 2 or n >= 5
        bold += n >= 3
    if not (italics % 2 and bold % 2):
        return line
    after_letter = after_word = after_space = None
    for m in threes:
        s = m.start()
        before, before2 = line[s - 1 : s], line[s - 2 : s - 1] if s > 1 else ""
        if before in ("", " "):
            after_space = after_space or m
        elif before2 in ("", " "):
            after_letter = after_letter or m
        else:
            after_word = after_word or m
    chosen = after_letter or after_word or after_space
    if chosen is None:
        return line
    return _QUOTES.sub("", line[: chosen.start()]) + "'" + _QUOTES.sub("", line[chosen.end() :])


def _nested_spans(tokens: Iterable[re.Match[str]], opener: str) -> tuple[list[tuple[int, int]], list[int]]:
    """Spans of nested delimiters (a token is a match's last group, or the whole match): every matched pair and
    every stray closer, then the starts of unclosed openers. No recursion: any depth is a list, never a stack
    overflow."""
    stack: list[int] = []
    spans: list[tuple[int, int]] = []
    for m in tokens:
        group = m.lastindex or 0
        start, end = m.span(group)
        if m.group(group) == opener:
            stack.append(start)
        elif stack:
            spans.append((stack.pop(), end))
        else:
            spans.append((start, end))
    return spans, stack


def _to_paragraph_end(text: str, starts: list[int]) -> list[tuple[int, int]]:
    """Unclosed tables end at the next blank line (MediaWiki closes them at the page's end, but a table left
    open by mistake, or closed by a template, would otherwise take the rest of the article)."""
    if not starts:
        return []
    blanks = [m.start() for m in _BLANK_LINE.finditer(text)]
    ends = [bisect_left(blanks, start) for start in starts]
    return [(start, blanks[i] if i < len(blanks) else len(text)) for start, i in zip(starts, ends)]


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the union of ``spans`` (nested or overlapping)."""
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    pos = 0
    for start, end in spans:
        if start > pos:
            out.append(text[pos:start])
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def _replace_links(text: str, hidden: AbstractSet[str]) -> str:
    """``[[...]]`` -> the link's text; hidden links go with their captions (links nested in them included).

    One frame of pieces per open ``[[``: a closing ``]]`` turns the innermost frame into its link's text. An
    unclosed ``[[`` loses its brackets only; a stray ``]]`` goes.
    """
    if "[[" in text:
        text = _SIMPLE_LINK.sub(lambda m: _link_text(m.group(1), hidden), text)
    if "[[" not in text:
        return text.replace("]]", "") if "]]" in text else text
    frames: list[list[str]] = [[]]
    too_deep = 0  # "[[" opened beyond MAX_LINK_DEPTH, still open: their "]]" go, like them
    pos = 0
    for m in _LINK_TOKEN.finditer(text):
        frames[-1].append(text[pos : m.start()])
        pos = m.end()
        if m.group() == "[[":
            if len(frames) > MAX_LINK_DEPTH:
                too_deep += 1
            else:
                frames.append([])
        elif too_deep:
            too_deep -= 1
        elif len(frames) > 1:
            inner = "".join(frames.pop())
            frames[-1].append(_link_text(inner, hidden))
    frames[-1].append(text[pos:])
    while len(frames) > 1:
        inner = "".join(frames.pop())
        frames[-1].append(inner)
    return "".join(frames[0])


def _link_text(inner: str, hidden: AbstractSet[str]) -> str:
    target, pipe, label = inner.partition("|")
    target = target.strip()
    if target.startswith(":"):  # [[:Category:X]] is a visible link to the category page
        target = target[1:].lstrip()
    elif ":" in target:
        prefix = target.partition(":")[0].strip().lower()
        if prefix in hidden or _LANGUAGE.fullmatch(prefix):
            return ""
    if not pipe:
        return target
    if label.strip():
        return label
    # The pipe trick: [[Paris, Texas|]] -> "Paris", [[Pipe (computing)|]] -> "Pipe", [[Help:Link|]] -> "Link".
    name = target.partition(":")[2] or target
    m = _PARENTHETICAL.search(name)
    return (name[: m.start()] if m else name).partition(",")[0].strip()


def _external_label(m: re.Match[str]) -> str:
    label = m.group(1)
    return label.strip() if label else ""


_NOT_PROSE_START = frozenset("*#:;|!" + _PRE)


def _raw_paragraphs(text: str) -> list[str]:
    """Blocks of prose lines; blank and non-prose lines (headings, lists, table rows, rules) separate them, and
    so do block-level tags at a line's start or end."""
    paragraphs: list[str] = []
    lines: list[str] = []
    for line in text.split("\n"):
        s = line.strip()
        ends_paragraph = False
        if s and (s[0] == "<" or s[-1] == ">"):
            m = _LEADING_BLOCK_TAGS.match(s)
            if m:
                if lines:
                    paragraphs.append(" ".join(lines))
                    lines = []
                s = s[m.end() :]
            end = len(s)
            while end and s[end - 1] == ">":  # trailing block tags, one by one from the end (no copies)
                cut = s.rfind("<", 0, end)
                if cut < 0 or not _BLOCK_TAG.fullmatch(s, cut, end):
                    break
                end = cut
                while end and s[end - 1].isspace():
                    end -= 1
            if end < len(s):
                s = s[:end]
                ends_paragraph = True
        if s and s[0] not in _NOT_PROSE_START and not (s[0] == "=" and s[-1] == "=") and not s.startswith("----"):
            lines.append(s)
        else:
            ends_paragraph = True
        if ends_paragraph and lines:
            paragraphs.append(" ".join(lines))
            lines = []
    if lines:
        paragraphs.append(" ".join(lines))
    return paragraphs


def _clean_paragraph(p: str) -> str:
    """Inline markup of one paragraph: HTML tags, quotes, entities, spaces; "" when no letter or digit is left."""
    if _PRE in p:  # only ever first in a line, and such lines are gone: never in the text
        p = p.replace(_PRE, "")
    if "<" in p:
        p = _BR.sub(" ", p)
        p = _TAG.sub("", p)
    if "&" in p:
        p = html.unescape(p)
    p = " ".join(p.split())
    if " (" in p:
        p = _EMPTY_PARENS.sub("", p)
        p = _OPENING_SEPARATORS.sub(" (", p)
        if _SEPARATOR_BEFORE_CLOSE.search(p):
            p = _CLOSING_SEPARATORS.sub(")", p)
    if " " in p:
        p = _SPACE_BEFORE_PUNCT.sub(r"\1", p)
    return p if _ALNUM.search(p) else ""
