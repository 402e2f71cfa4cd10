from __future__ import annotations

import os
from pathlib import Path

import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.inputs.resolve import relative_names, resolve_inputs


def test_relative_names_keep_files_apart():
    assert relative_names(["/d/wiki/AA/wiki_00", "/d/wiki/AB/wiki_00", "/d/books/a.txt"]) == [
        "wiki/AA/wiki_00",
        "wiki/AB/wiki_00",
        "books/a.txt",
    ]
    assert relative_names(["/d/c/x.txt"]) == ["x.txt"]
    assert relative_names(["gs://b/wiki/a", "gs://b/wiki/b"]) == ["a", "b"]
    assert relative_names(["gs://b/x", "/local/x"]) == ["gs://b/x", "/local/x"]  # nothing in common


def test_relative_globs_with_a_wildcard_folder_match(tmp_path, monkeypatch):
    for corpus in ("corpusA", "corpusB"):
        (tmp_path / corpus / "wiki").mkdir(parents=True)
        (tmp_path / corpus / "wiki" / "wiki_00").write_text("<doc id=1>\nT\nText.\n</doc>\n")
    (tmp_path / "linked").symlink_to(tmp_path / "corpusA")
    monkeypatch.chdir(tmp_path)
    found = resolve_inputs(["corpus*/wiki/*"], "wikiextractor")
    assert [f.path for f in found] == [str(tmp_path / c / "wiki" / "wiki_00") for c in ("corpusA", "corpusB")]
    assert [f.name for f in found] == ["corpusA/wiki/wiki_00", "corpusB/wiki/wiki_00"]
    # Links are followed (the linked folder's file is found) but a file reached twice is one input.
    assert [f.path for f in resolve_inputs(["linked/wiki/*"], "wikiextractor")] == [
        str(tmp_path / "linked/wiki/wiki_00")
    ]
    both = resolve_inputs(["linked/wiki/*", "**/wiki_00"], "wikiextractor")
    assert [f.path for f in both] == [str(tmp_path / c / "wiki" / "wiki_00") for c in ("corpusA", "corpusB")]
    # The same file spelled two ways is one input.
    assert len(resolve_inputs(["corpusA/wiki/wiki_00", "./corpusA/wiki/../wiki/wiki_00"], "wikiextractor")) == 1
    with pytest.raises(UsageError, match="matches no files"):
        resolve_inputs(["corpus*/books/*"], "text")


def test_links_loops_and_literal_paths_each_file_once(tmp_path):
    """An input is its content, listed once: loops of folder links are walked once, a link beside its target is
    one input, and an existing path is taken literally even when it reads as a glob."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("x")
    (tmp_path / "a" / "back").symlink_to(tmp_path)  # a loop: a/back/a/back/...
    (tmp_path / "a" / "also").symlink_to(tmp_path / "a")  # a second way into the same folder
    (tmp_path / "y.txt").symlink_to(tmp_path / "a" / "x.txt")
    found = resolve_inputs([str(tmp_path / "**" / "*.txt")])
    assert [f.path for f in found] == [str(tmp_path / "a" / "x.txt")]
    (tmp_path / "p1.txt").write_text("glob")
    (tmp_path / "p[1].txt").write_text("literal")
    assert [f.path for f in resolve_inputs([str(tmp_path / "p[1].txt")])] == [str(tmp_path / "p[1].txt")]


def test_a_recursive_pattern_walks_any_depth(tmp_path, monkeypatch):
    """One line, always (issue 33): a folder 1,500 levels deep under ``**`` ended the listing with "maximum
    recursion depth exceeded" (Python 3.11's os.walk recursed once per level); the walk keeps a stack. Here
    the recursion limit is lowered below the depth instead, which keeps the test fast."""
    import sys

    monkeypatch.chdir(tmp_path)
    for _ in range(400):  # relative mkdir/chdir: each call's path stays short
        os.mkdir("d")
        os.chdir("d")
    Path("deep.txt").write_text("One sentence.", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(len(__import__("inspect").stack()) + 150, 200))
    try:
        found = resolve_inputs([str(tmp_path / "**" / "*.txt")])
    finally:
        sys.setrecursionlimit(limit)
    assert [f.path.removeprefix(str(tmp_path)) for f in found] == ["/d" * 400 + "/deep.txt"]
