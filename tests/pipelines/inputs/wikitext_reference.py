"""Test oracles for ``wikitext_paragraphs``: the same article text made by a wikitext library's own parser.

Both libraries turn markup into text (templates, links, tags, entities, bold and italics) by their own parsing;
what counts as prose is a policy, and the oracles apply ours so that the words can be compared: tags dropped with
their content (``DROPPED_TAGS``), file, category and interlanguage links dropped with their captions, tables
dropped, preformatted lines (a space first) dropped, and paragraphs made by the simple line rules of
``prose_paragraphs`` (written here again, not imported).

- ``wikitextparser_paragraphs``: wikitextparser's ``plain_text`` keeps the line structure (``== x ==`` lines,
  ``*`` items), so the line rules apply to its output as they are. The reference of the tests.
- ``mwparserfromhell_paragraphs``: ``strip_code`` loses list markers and headings, so the top-level nodes are
  walked: headings and tables go, a list item goes up to its line's end. For ``benchmarks/wikipedia_pipeline.py --wikitext``.

``word_f1``: agreement of two texts as bags of words (lower-cased ``\\w+`` runs): order and paragraph breaks
do not count, a word missing or left over does.
"""

from __future__ import annotations

import re
from collections import Counter

from bertstream.pipelines.inputs.wikitext import DEFAULT_HIDDEN_NAMESPACES, DROPPED_TAGS

_DROPPED = frozenset(DROPPED_TAGS)
_LANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z]{1,8})*|simple")
_WORD = re.compile(r"\w+")
_ALNUM = re.compile(r"[^\W_]")


def hidden_link(target: str) -> bool:
    """A link shown nowhere in the text: a file, a category, another language's article."""
    target = target.strip()
    if target.startswith(":") or ":" not in target:
        return False
    prefix = target.partition(":")[0].strip().lower()
    return prefix in DEFAULT_HIDDEN_NAMESPACES or bool(_LANGUAGE.fullmatch(prefix))


def prose_paragraphs(text: str) -> list[str]:
    """Blocks of lines between blank lines; heading, list, indented and table-row lines end a block too."""
    paragraphs, lines = [], []
    for line in text.split("\n"):
        s = line.strip()
        if not s or s[0] in "*#:;|!" or (s[0] == "=" and s[-1] == "=") or s.startswith("----"):
            if lines:
                paragraphs.append(" ".join(lines))
                lines = []
        else:
            lines.append(s)
    if lines:
        paragraphs.append(" ".join(lines))
    return [" ".join(p.split()) for p in paragraphs if _ALNUM.search(p)]


def wikitextparser_paragraphs(wikitext: str) -> list[str]:
    import wikitextparser as wtp

    parsed = wtp.parse(_without_preformatted(wikitext))
    for tag in reversed(parsed.get_tags()):  # innermost last: an outer one's removal keeps inner spans valid
        if tag.name.lower() in _DROPPED:
            tag.string = ""
    for link in reversed(parsed.wikilinks):
        if hidden_link(link.target):
            link.string = ""
    return prose_paragraphs(parsed.plain_text(replace_tables=lambda table: ""))


_SPACE_FIRST = re.compile(r"^ .*$", re.M)


def _without_preformatted(wikitext: str) -> str:
    """The source with its preformatted lines blank (a space first, outside any template, table, tag or comment
    as wikitextparser parses them: there a space first is no preformatting)."""
    lines = list(_SPACE_FIRST.finditer(wikitext))
    if not lines:
        return wikitext
    import wikitextparser as wtp  # the mwparserfromhell oracle too: that tree's nesting is less to be trusted

    parsed = wtp.parse(wikitext)
    inside = [x.span for x in (*parsed.templates, *parsed.parser_functions, *parsed.tables, *parsed.comments)]
    inside += [tag.span for tag in parsed.get_tags()]
    pre = [m.span() for m in lines if not any(a < m.start() < b for a, b in inside)]
    for start, end in reversed(pre):
        wikitext = wikitext[:start] + wikitext[end:]
    return wikitext


def mwparserfromhell_paragraphs(wikitext: str) -> list[str]:
    import mwparserfromhell as mwp
    from mwparserfromhell.nodes import Heading, Tag, Text, Wikilink

    out: list[str] = []
    in_list_item = False
    for node in mwp.parse(_without_preformatted(wikitext)).nodes:
        if in_list_item:  # a list item runs to its line's end
            if isinstance(node, Text) and "\n" in node.value:
                in_list_item = False
                out.append(node.value[node.value.index("\n") :])
            continue
        if isinstance(node, Heading):
            out.append("\n\n")
        elif isinstance(node, Tag) and node.wiki_markup in ("*", "#", ":", ";"):
            in_list_item = True
            out.append("\n\n")
        elif isinstance(node, Tag) and (str(node.tag).lower() in _DROPPED or str(node.tag).lower() == "table"):
            out.append("\n\n" if str(node.tag).lower() == "table" else "")
        elif isinstance(node, Wikilink) and hidden_link(str(node.title)):
            continue
        else:
            out.append(mwp.wikicode.Wikicode([node]).strip_code())
    return prose_paragraphs("".join(out))


def words(paragraphs: list[str]) -> Counter[str]:
    return Counter(_WORD.findall(" ".join(paragraphs).lower()))


def word_f1(ours: list[str], reference: list[str]) -> float:
    a, b = words(ours), words(reference)
    if not a and not b:
        return 1.0
    common = sum((a & b).values())
    return 2 * common / (sum(a.values()) + sum(b.values()))
