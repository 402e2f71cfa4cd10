from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertstream.pipelines.cli import main
from tests.argv import with_flags
from tests.conftest import shared_path


def invoke(*args: str):
    return CliRunner().invoke(main, ["task", *args])


def invoke_mrpc_dev(vocab, output, *more: str):
    """The MRPC preset over the shared dev.tsv (real GLUE data), written to ``output``."""
    mrpc = str(shared_path("tasks", "mrpc", "dev.tsv"))
    return invoke(
        "classification",
        "--glue",
        "mrpc",
        "--input",
        mrpc,
        "--vocab",
        str(vocab / "vocab.txt"),
        *more,
        "--output",
        str(output),
    )


def test_mrpc_dev_preset_through_the_cli(tmp_path, wiki_vocab):
    out = tmp_path / "mrpc"
    r = invoke_mrpc_dev(wiki_vocab, out)
    assert r.exit_code == 0, r.output
    assert "rows: 408 read, 408 used, 0 dropped" in r.output and f"{out}/manifest.json" in r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["task"]["labels"] == ["0", "1"] and m["task"]["columns"]["text_pair"] == "#2 String"
    labels = [
        int(line.split("\t", 1)[0])
        for line in shared_path("tasks", "mrpc", "dev.tsv").read_text("utf-8-sig").splitlines()[1:]
    ]
    assert m["statistics"]["label_counts"] == {"0": labels.count(0), "1": labels.count(1)}
    assert m["counters"]["control_chars_removed"] == 1  # the BOM
    assert "  altered: control_chars_removed 1\n" in r.output  # said as pretraining says it (a manifest's alone)


@pytest.fixture()
def train_tsv(tmp_path):
    p = tmp_path / "train.tsv"
    p.write_text("text\tlabel\na module\tpos\n")
    return str(p)


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--text-column", "sentence", "--label-column", "label"], "'--text-column'"),
        (["--text-column", "text", "--label-column", "gold"], "'--label-column'"),
        (["--text-column", "text"], "'--label-column'"),
        (["--text-column", "text", "--text-pair-column", "text", "--label-column", "label"], "'--text-pair-column'"),
        (["--glue", "sst2", "--text-column", "text"], "'--glue'"),
        (["--text-column", "text", "--label-column", "label", "--labels", "a,,b"], "'--labels'"),
        # an empty set read as no --labels: the set was then taken from the data (issue 53)
        (["--text-column", "text", "--label-column", "label", "--labels", ""], "'--labels'"),
        (["--text-column", "text", "--label-column", "label", "--max-seq-length", "4"], "'--max-seq-length'"),
        (["--text-column", "text", "--label-column", "label", "--num-shards", "-1"], "'--num-shards'"),
        (["--text-column", "text", "--label-column", "label", "--split", "a b"], "'--split'"),
        (
            ["--text-column", "text", "--label-column", "label", "--label-set-from", "/nonexistent"],
            "'--label-set-from'",
        ),
        (
            ["--text-column", "text", "--label-column", "label", "--max-seq-lenght", "64"],
            "--max-seq-lenght",
        ),  # as typed
    ],
)
def test_classification_usage_errors_name_the_flag(tmp_path, demo_vocab, train_tsv, args, flag):
    r = invoke(
        "classification",
        "--input",
        train_tsv,
        "--vocab",
        str(demo_vocab / "vocab.txt"),
        "--output",
        str(tmp_path / "o"),
        *args,
    )
    assert r.exit_code == 2, r.output
    assert flag in r.output
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_ner_and_squad_usage_errors_name_the_flag(tmp_path, demo_vocab, train_tsv):
    vocab = str(demo_vocab / "vocab.txt")
    r = invoke("ner", "--input", train_tsv, "--vocab", vocab, "--output", str(tmp_path / "o"))
    assert r.exit_code == 2 and "'--input'" in r.output and "not a CoNLL file" in r.output
    conll = tmp_path / "train.txt"
    conll.write_text("Guido NNP B-NP B-PER\n")
    for args, flag in (
        (["--window-overlap", "100"], "'--window-overlap'"),
        (["--labels", "B-PER"], "'--labels'"),
        (["--vocab", str(tmp_path / "missing.txt")], "'--vocab'"),
    ):
        r = invoke(*with_flags(["ner", "--input", str(conll), "--vocab", vocab, "--output", str(tmp_path / "o")], args))
        assert r.exit_code == 2 and flag in r.output, (args, r.output)
    squad = tmp_path / "train-v1.1.json"
    squad.write_text('{"data": []}')
    for args, flag in (
        (["--articles", "5:2"], "'--articles'"),
        (["--articles", "x"], "'--articles'"),
        (["--doc-stride", "400"], "'--doc-stride'"),
        (["--max-query-length", "0"], "'--max-query-length'"),
    ):
        r = invoke("squad", "--input", str(squad), "--vocab", vocab, "--output", str(tmp_path / "o"), *args)
        assert r.exit_code == 2 and flag in r.output, (args, r.output)
    r = invoke("squad", "--input", train_tsv, "--vocab", vocab, "--output", str(tmp_path / "o"))
    assert r.exit_code == 2 and "'--input'" in r.output and "not SQuAD JSON" in r.output


def test_input_errors_while_running_exit_1_without_a_manifest(tmp_path, demo_vocab):
    vocab = str(demo_vocab / "vocab.txt")
    squad = tmp_path / "train-v1.1.json"
    squad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": []}]}))
    r = invoke("squad", "--input", str(squad), "--vocab", vocab, "--output", str(tmp_path / "o"), "--articles", "3:5")
    assert r.exit_code == 1, r.output
    assert "--articles 3:5 is outside its 1 articles" in r.output and "no manifest was written" in r.output
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_one_input_spelled_two_ways_is_read_once(tmp_path, demo_vocab, monkeypatch):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "train.tsv").write_text("text\tlabel\na module\tpos\nthe class\tneg\n")
    monkeypatch.chdir(tmp_path)
    r = invoke(
        "classification",
        "--input",
        "in/train.tsv",
        "--input",
        "./in/../in/train.tsv",
        "--text-column",
        "text",
        "--label-column",
        "label",
        "--vocab",
        str(demo_vocab / "vocab.txt"),
        "--output",
        "out",
    )
    assert r.exit_code == 0, r.output
    assert "rows: 2 read" in r.output
    assert len(json.loads((tmp_path / "out" / "manifest.json").read_text())["inputs"]) == 1


def test_a_file_reached_twice_through_a_hard_link_is_read_once(tmp_path, demo_vocab, monkeypatch):
    """Same device and inode: one file under two names, read twice before (its rows twice) (issue 53)."""
    import os

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "train.tsv").write_text("text\tlabel\na module\tpos\nthe class\tneg\n")
    os.link(tmp_path / "in" / "train.tsv", tmp_path / "in" / "copy.tsv")
    monkeypatch.chdir(tmp_path)
    common = ["--text-column", "text", "--label-column", "label", "--vocab", str(demo_vocab / "vocab.txt")]
    r = invoke("classification", "--input", "in/*.tsv", *common, "--split", "train", "--output", "out")
    assert r.exit_code == 0, r.output
    assert "rows: 2 read" in r.output
    assert len(json.loads((tmp_path / "out" / "manifest.json").read_text())["inputs"]) == 1


def test_the_summary_says_what_truncation_removed(tmp_path, wiki_vocab):
    r = invoke_mrpc_dev(wiki_vocab, tmp_path / "o", "--max-seq-length", "32")
    assert r.exit_code == 0, r.output
    c = json.loads((tmp_path / "o" / "manifest.json").read_text())["counters"]
    assert c["rows_truncated"] > 0
    assert (
        f"  truncated to --max-seq-length 32: {c['rows_truncated']} rows, {c['tokens_removed_by_truncation']} "
        "tokens removed (" in r.output
    )


def test_a_column_the_header_names_twice_is_refused(tmp_path, demo_vocab):
    """header.index took the first of the two (issue 53): which one the user meant cannot be known."""
    p = tmp_path / "train.tsv"
    p.write_text("text\tlabel\ttext\nthe first\tpos\tthe second\n")
    args = ["--input", str(p), "--text-column", "text", "--label-column", "label"]
    r = invoke("classification", *args, "--vocab", str(demo_vocab / "vocab.txt"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 2 and "'--text-column'" in r.output and "names 'text' 2 times (columns [0, 2])" in r.output


def test_sts_b_scores_outside_0_to_5_are_dropped_and_counted(tmp_path, demo_vocab):
    p = tmp_path / "dev.tsv"
    rows = [("a cat sat", "a cat sits", "4.2"), ("one", "two", "7.5"), ("x y", "y x", "-1"), ("it is", "it was", "0")]
    p.write_text("sentence1\tsentence2\tscore\n" + "".join("\t".join(r) + "\n" for r in rows))
    r = invoke(
        "classification",
        "--glue",
        "stsb",
        "--input",
        str(p),
        "--vocab",
        str(demo_vocab / "vocab.txt"),
        "--output",
        str(tmp_path / "o"),
    )
    assert r.exit_code == 0, r.output
    c = json.loads((tmp_path / "o" / "manifest.json").read_text())["counters"]
    assert c["rows_used"] == 2 and c["rows_dropped.score_out_of_range"] == 2
    assert "score_out_of_range: 2" in r.output


def test_every_task_summary_says_its_unk_rate_and_warns_when_the_vocabulary_does_not_fit(tmp_path, wiki_vocab):
    """Round 8: a task summary said no [UNK] rate: ChnSentiCorp under an English vocabulary wrote rows of 95%
    [UNK], exit 0 and no word (pretraining's summary has said it since round 6). Now the rate, and its warning."""
    chn = tmp_path / "chn.tsv"
    chn.write_text("".join(shared_path("tasks", "chnsenticorp", "dev.tsv").read_text().splitlines(True)[:60]))
    vocab = str(wiki_vocab / "vocab.txt")
    args = ["--text-column", "text_a", "--label-column", "label", "--split", "train", "--vocab", vocab]
    r = invoke("classification", "--input", str(chn), *args, "--output", str(tmp_path / "zh"))
    assert r.exit_code == 0, r.output
    unk = json.loads((tmp_path / "zh" / "manifest.json").read_text())["counters"]["unk_tokens"]
    assert f"  [UNK]: {unk} of " in r.output and unk > 0
    assert "% of the tokens are [UNK]" in r.output.splitlines()[-1]
    ok = invoke_mrpc_dev(wiki_vocab, tmp_path / "mrpc")
    assert ok.exit_code == 0 and "  [UNK]: " in ok.output and "are [UNK]" not in ok.output, ok.output
