"""``--format auto`` on the shared corpus's real files, and the layouts a new user's own text comes in."""

from __future__ import annotations

import gzip
import json

import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.files import COMPRESSED_SUFFIXES
from bertstream.pipelines.inputs import detect as D
from bertstream.pipelines.inputs.detect import detect_lines, sample_lines
from bertstream.pipelines.inputs.formats import claimed_by
from bertstream.pipelines.inputs.resolve import resolve_inputs
from tests.conftest import shared_path

PARAGRAPHS = [
    "The quick brown fox jumps over the lazy dog. It was a sunny day in the park. Everyone was happy.",
    "Later that afternoon the clouds came in. Rain began to fall on the empty benches. The fox slept.",
    "In the morning the sun returned. The grass was wet and bright. Children came back to play.",
]


@pytest.mark.parametrize(
    ("parts", "layout"),
    [
        (("pretrain", "sample_text.txt"), "sentences"),  # BERT's own sample: a sentence a line
        (("pretrain", "wikipedia", "wiki_00"), "wikiextractor"),
        (("pretrain", "gutenberg", "1342-0.txt"), "text"),  # hard-wrapped lines
        (("pretrain", "gutenberg", "1184-0.txt"), "text"),  # CRLF endings
        (("pretrain", "chinese", "zhwiki", "wiki_00"), "wikiextractor"),
        (("pretrain", "chinese", "wiki_zh_2019", "wiki_00"), "jsonl"),
        (("pretrain", "chinese", "CLUECorpusSmall_bert_sampled.txt"), "sentences"),  # 。 ends a sentence
        (("pretrain", "chinese", "CLUECorpusSmall_sampled.txt"), "lines"),  # the same text, a document a line
    ],
)
def test_real_files_are_read_in_their_own_layout(parts, layout):
    assert detect_lines(sample_lines(str(shared_path(*parts)))).format == layout


def test_ordinary_paragraphs_are_text_not_sentences():
    # issue 32: three paragraphs read as `sentences` gave 3 one-sentence documents, IsNext 0.000
    found = detect_lines("\n\n".join(PARAGRAPHS).splitlines())
    assert found.format == "text" and "several sentences" in found.why
    assert detect_lines(PARAGRAPHS).format == "lines"  # no blank line between them: a document a line
    one_each = [s.strip() + "." for p in PARAGRAPHS for s in p.split(".") if s.strip()]
    assert detect_lines([*one_each[:5], "", *one_each[5:]]).format == "sentences"


def test_wikiextractor_markup_without_its_prefix_is_not_text(tmp_path):
    # issue 32: a WikiExtractor file given without `wikiextractor:` was read as sentences, </doc> lines and all
    wiki = shared_path("pretrain", "wikipedia", "wiki_00")
    (tmp_path / "wiki_00").write_bytes(wiki.read_bytes()[:20000])
    assert detect_lines(sample_lines(str(tmp_path / "wiki_00"))).format == "wikiextractor"


def test_auto_says_its_choice_in_one_line_and_refuses_files_that_disagree(tmp_path, capfd):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "para.txt").write_text("\n\n".join(PARAGRAPHS) + "\n")
    found = resolve_inputs([str(tmp_path / "a" / "*.txt")], "auto")
    assert [f.format for f in found] == ["text"]
    said = [line for line in capfd.readouterr().err.splitlines() if "--format auto" in line]
    assert said == [
        f"[bertprep] --format auto: {tmp_path / 'a' / '*.txt'} read as text (3 of 3 lines hold several sentences, "
        "blank lines between them); --format chooses another"
    ]
    # an explicit format is never second-guessed
    assert [f.format for f in resolve_inputs([str(tmp_path / "a" / "*.txt")], "sentences")] == ["sentences"]
    (tmp_path / "a" / "wiki.txt").write_text('<doc id="1" url="u" title="T">\nT\nSome text here.\n</doc>\n')
    with pytest.raises(UsageError, match=r"cannot tell the layout of .*para.txt looks like text .*wiki.txt looks like"):
        resolve_inputs([str(tmp_path / "a" / "*.txt")], "auto")


def _auto(path) -> str:
    return resolve_inputs([str(path)], "auto")[0].format


def test_json_lines_longer_than_the_first_sample_are_still_json_lines(tmp_path):
    # issue 44: records of 100 KB (books, long articles) left no whole line in 64 KB, and the cut one read as text
    book = " ".join(PARAGRAPHS) * 400
    p = tmp_path / "books.jsonl"
    p.write_text("".join(json.dumps({"id": i, "text": book}) + "\n" for i in range(6)))
    assert len(book) > 100_000 and _auto(p) == "jsonl"


def test_json_lines_with_lines_cut_short_are_refused_not_read_as_text(tmp_path):
    lines = [json.dumps({"text": p}) for p in PARAGRAPHS * 4]
    lines[::5] = [s[: len(s) // 2] for s in lines[::5]]  # one line in five cut short
    p = tmp_path / "cut.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=r"cut.jsonl.*9 of 12 lines are JSON objects.*3 more start with \{.*--format"):
        _auto(p)


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        (
            "page.html",
            b"<!DOCTYPE html>\n<html><head><title>T</title></head>\n<body>\n<p>Some text.</p>\n</body>\n",
            "markup",
        ),
        ("feed.xml", b'<?xml version="1.0"?>\n<rss>\n<item>\n<title>News.</title>\n</item>\n</rss>\n', "markup"),
        # a JSON document that is no text anyone reads (a model's config): a records format may claim an array of
        # texts one day, and this case must not be the one it changes
        ("config.json", b'{\n  "hidden_size": 768,\n  "num_attention_heads": 12\n}\n', "JSON"),
        ("model.bin", bytes(range(256)) * 64, "binary"),
        ("a.txt", b"Some text.\n" + b"\x00\x01\x02\x03" * 2000 + b"\n", "binary"),
    ],
)
def test_binary_markup_and_json_are_refused_never_read_as_text(tmp_path, name, data, why):
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(UsageError, match=rf"cannot tell the layout of .*{name}.*{why}.*--format"):
        _auto(p)


def test_a_first_line_longer_than_auto_reads_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "MAX_SAMPLE_BYTES", 1 << 20, raising=False)
    p = tmp_path / "one.txt"
    p.write_text("word " * 300_000)  # 1.5 MB without a newline
    with pytest.raises(UsageError, match=r"one.txt.*no whole line in its first 1048576 bytes.*--format"):
        _auto(p)
    assert resolve_inputs([f"text:{p}"])[0].format == "text"  # a format given is never second-guessed


@pytest.mark.parametrize(
    ("name", "data"),
    [
        # issue 44: a table's lines were read as text, separators, header and labels included; issue 55: the
        # format that claims the ending (formats/csv.py's ENDINGS) reads it, the table says which
        ("scores.csv", b'id,text,label\n1,"Some text here.",1\n2,"More text.",0\n'),
        ("train.tsv.gz", gzip.compress(b"sentence\tlabel\nSome text here.\t1\n", mtime=0)),
    ],
)
def test_a_file_whose_ending_a_format_claims_is_read_in_that_format(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    claimed = claimed_by(str(p), COMPRESSED_SUFFIXES)
    assert claimed is not None and _auto(p) == claimed[0]
    assert D.detect_file(str(p)).why == f"its name ends {claimed[1]}"
