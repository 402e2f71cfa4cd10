"""Chinese task data through the task readers and pipelines: ChnSentiCorp (a TSV whose texts open with bare
quotes) and People's Daily NER (``char TAG`` lines)."""

from __future__ import annotations

import csv
import json
from collections import Counter

import pyarrow as pa
import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common.counters import Tally
from bertstream.pipelines.tasks.classification import parse as TB
from bertstream.pipelines.tasks.ner import parse as CN
from bertstream.pipelines.tasks.read import file_lines
from tests.conftest import shared_path
from tests.jobs import run_classification, run_ner


def vocab() -> str:
    return str(shared_path("vocab", "bert-base-chinese-vocab.txt"))


def people_daily(split: str) -> list:
    path = str(shared_path("tasks", "peoples_daily_ner", f"example.{split}"))
    tally = Tally()
    return list(CN.parse_conll(file_lines(path, tally), path, 0, "iob2", tally, input_format="char-tag")), tally


@pytest.mark.parametrize(
    "split,sentences,chars,entities", [("dev", 2318, 109_870, 3819), ("test", 4636, 219_197, 7707)]
)
def test_peoples_daily_char_tag_sentences(split, sentences, chars, entities):
    rows, tally = people_daily(split)
    # the shared data's README counts: every sentence, character and entity is read
    assert len(rows) == sentences
    assert sum(len(r.words) for r in rows) == chars
    assert sum(t.startswith("B-") for r in rows for t in r.tags) == entities
    assert all(len(w) == 1 for r in rows for w in r.words)
    assert {t for r in rows for t in r.tags} == {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"}
    c = tally.counters()
    assert not any(k.startswith(("lines_malformed", "sentences_dropped", "invalid_iob2")) for k in c), c


def test_ner_format_mismatch_names_the_right_format():
    pd = str(shared_path("tasks", "peoples_daily_ner", "example.dev"))
    conll = str(shared_path("tasks", "conll2003", "valid.txt"))
    with pytest.raises(UsageError, match="--format char-tag"):
        CN.looks_like_conll(pd)
    with pytest.raises(UsageError, match="--format conll"):
        CN.looks_like_conll(conll, input_format="char-tag")
    CN.looks_like_conll(pd, input_format="char-tag")


def test_chnsenticorp_bare_quotes_do_not_merge_rows():
    path = str(shared_path("tasks", "chnsenticorp", "train.tsv"))
    with open(path, encoding="utf-8", newline="") as f:
        merged = sum(1 for _ in csv.reader(f, delimiter="\t")) - 1
    assert merged < 9600  # the quirk is real: a quoting reader merges rows
    tally = Tally()
    layout = TB.TableLayout("tsv", True, "text_a", None, "label")
    rows = list(TB.parse_table(file_lines(path, tally), path, 0, layout, tally))
    assert len(rows) == 9600 and Counter(r.label for r in rows) == {"0": 4801, "1": 4799}
    quoted = [r for r in rows if r.text_a.startswith('"')]
    assert len(quoted) == 3 and all("\t" not in r.text_a and "\n" not in r.text_a for r in quoted)


def test_chinese_task_pipelines_end_to_end(tmp_path):
    """A slice of each through the Beam pipelines: rows kept, labels aligned with characters."""
    cls_in = tmp_path / "chnsenticorp.tsv"
    lines = shared_path("tasks", "chnsenticorp", "train.tsv").read_text(encoding="utf-8").split("\n")
    quoted = [line for line in lines[1:] if line.split("\t")[-1].startswith('"')]
    cls_in.write_text("\n".join([lines[0], *lines[1:300], *quoted]) + "\n", encoding="utf-8")
    r = run_classification(
        inputs=[str(cls_in)],
        vocab=vocab(),
        output=str(tmp_path / "cls"),
        text_column="text_a",
        label_column="label",
        split="train",
    )
    assert r.manifest.totals["rows"] == 299 + len(quoted) == 302
    ner_in = tmp_path / "pd.txt"
    blocks = shared_path("tasks", "peoples_daily_ner", "example.dev").read_text(encoding="utf-8").split("\n\n")[:200]
    ner_in.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    r = run_ner(
        inputs=[str(ner_in)], vocab=vocab(), output=str(tmp_path / "ner"), input_format="char-tag", split="train"
    )
    manifest = json.loads((tmp_path / "ner" / "manifest.json").read_text())
    assert manifest["task"]["input_format"] == "char-tag" and r.manifest.totals["rows"] >= 200
    shard = tmp_path / "ner" / manifest["shards"][0]["path"]
    table = pa.ipc.open_file(pa.memory_map(str(shard))).read_all().to_pydict()
    names = manifest["task"]["labels"]
    sentences = [[line.split() for line in b.split("\n") if line.strip()] for b in blocks]
    got: Counter = Counter()
    for labels, owned in zip(table["labels"], table["owned"]):
        got.update(names[lab] for lab, own in zip(labels, owned) if lab != -100 and own)
    # each character is one word, labelled once (by the window that owns it), with its own tag
    assert got == Counter(tag for sentence in sentences for _, tag in sentence)
