"""Every relative link in README.md and docs/ leads somewhere: the file exists, and a ``#anchor`` names a heading
of that file as GitHub spells its anchors (lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# A section cited by name in prose or code: README, "Object stores"; README's 'After the demo'; docs/x.md ("A").
_CITED = re.compile(r"\b(README|docs/[\w.]+\.md)(?:\.md)?(?:'s|,)? \(?[\"'“]([^\"'”\n]{2,100})[\"'”]")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation other than hyphens and underscores dropped."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """``FILE: TARGET (why)`` for each relative link of ``path`` that leads nowhere; FILE relative to ``root``."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, frag = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            broken.append(f"{path.relative_to(root)}: {target} (no heading #{frag})")
    return broken


def broken_citations(path: Path, root: Path = REPO) -> list[str]:
    """Sections that ``path`` cites by name (``README, "Object stores"``) and that have no such heading."""
    broken = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for doc, section in _CITED.findall(line):
            dest = root / ("README.md" if doc == "README" else doc)
            cited = anchor(section)  # a section is cited by its name, the command in its heading left out
            if not dest.exists() or not any(a == cited or a.startswith(cited + "-") for a in anchors(dest)):
                broken.append(f"{path.relative_to(root)}:{line_no}: {doc}, {section!r}")
    return broken


def test_anchor_follows_githubs_spelling():
    assert anchor("Scale-out cost: CPU-seconds per MB (`pipeline_scale.py`, issue 34)") == (
        "scale-out-cost-cpu-seconds-per-mb-pipeline_scalepy-issue-34"
    )
    assert anchor("Your own text to a fine-tuned model") == "your-own-text-to-a-fine-tuned-model"


def test_a_missing_file_or_heading_is_found(tmp_path):
    (tmp_path / "b.md").write_text("## A section\n")
    (tmp_path / "a.md").write_text(
        "# Here\n\n[ok](#here) [bad](#there) [gone](c.md) [web](https://x.org) [in b](b.md#a-section) [not in b](b.md#x)\n"
        "```\n[in a fence](nowhere.md)\n```\n"
    )
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        "a.md: #there (no heading #there)",
        "a.md: c.md (no such file)",
        "a.md: b.md#x (no heading #x)",
    ]


def test_a_cited_section_that_is_gone_is_found(tmp_path):
    (tmp_path / "README.md").write_text("# Title\n\n## After the demo\n")
    (tmp_path / "x.py").write_text('# see README, "After the demo"\n# and README\'s "Object stores"\n')
    assert broken_citations(tmp_path / "x.py", tmp_path) == ["x.py:2: README, 'Object stores'"]


def test_every_section_cited_by_name_exists():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    files = [REPO / f for f in tracked.split() if f.endswith((".py", ".md", ".sh")) or f == "Makefile"]
    broken = [b for f in files if f.exists() and f.name != Path(__file__).name for b in broken_citations(f)]
    assert not broken, "sections cited that do not exist:\n" + "\n".join(broken)


def test_every_relative_link_and_anchor_in_the_docs_resolves():
    broken = [b for doc in documents() for b in broken_links(doc)]
    assert not broken, "broken links:\n" + "\n".join(broken)
