from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from bertstream.pipelines.cli import main


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, demo_corpus, demo_vocab):
    out = tmp_path_factory.mktemp("cli") / "ds"
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            str(demo_corpus / "a*.txt"),
            "--format",
            "text",
            "--vocab",
            str(demo_vocab / "tokenizer.json"),
            "--output",
            str(out),
            "--dupe-factor",
            "2",
            "--num-shards",
            "2",
            "--output-format",
            "both",
        ],
    )
    assert r.exit_code == 0, r.output
    return out, r.output


def test_summary_reports_documents_drops_speed_and_paths(dataset):
    out, text = dataset
    assert "MB/s" in text and "instances/s" in text
    assert "documents:" in text and "dropped" in text and "NotNext" in text
    assert f"{out}/manifest.json" in text


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--max-seq-length", "4", "'--max-seq-length'"),
        ("--masked-lm-prob", "1.5", "'--masked-lm-prob'"),
        ("--dupe-factor", "0", "'--dupe-factor'"),
        ("--max-predictions-per-seq", "500", "'--max-predictions-per-seq'"),
        ("--short-seq-prob", "-1", "'--short-seq-prob'"),
        ("--output-format", "parquet", "'--output-format'"),
        ("--max-seq-lenght", "64", "--max-seq-lenght"),  # as typed
    ],
)
def test_nonsense_parameters_are_usage_errors_naming_the_flag(tmp_path, demo_corpus, demo_vocab, flag, value, message):
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            str(demo_corpus / "assert.txt"),
            "--vocab",
            str(demo_vocab / "vocab.txt"),
            "--output",
            str(tmp_path / "o"),
            flag,
            value,
        ],
    )
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_missing_vocab_and_existing_output_are_usage_errors(dataset, demo_corpus, tmp_path):
    out, _ = dataset
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            str(demo_corpus / "assert.txt"),
            "--vocab",
            str(tmp_path / "none.txt"),
            "--output",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 2 and "'--vocab'" in r.output
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            str(demo_corpus / "assert.txt"),
            "--vocab",
            str(out / "vocab.txt"),
            "--output",
            str(out),
        ],
    )
    # The dataset's own vocabulary lies inside --output: refused, with or without --overwrite.
    assert r.exit_code == 2 and "overlaps --vocab" in r.output
    shutil.copy(out / "vocab.txt", tmp_path / "v.txt")
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            str(demo_corpus / "assert.txt"),
            "--vocab",
            str(tmp_path / "v.txt"),
            "--output",
            str(out),
        ],
    )
    assert r.exit_code == 2 and "--overwrite" in r.output


def test_inspect_summary_json_decode_and_verify(dataset, tmp_path):
    out, _ = dataset
    r = CliRunner().invoke(main, ["inspect", str(out), "--json"])
    stats = json.loads(r.output)["statistics"]
    assert r.exit_code == 0 and stats["mask_fractions"]["mask"] > 0.7
    r = CliRunner().invoke(main, ["inspect", str(out), "--decode", "3"])
    assert r.exit_code == 0 and r.output.count("[CLS]") == 3 and "[MASK→" in r.output
    r = CliRunner().invoke(main, ["inspect", str(out), "--verify"])
    assert r.exit_code == 0 and "4/4 shards ok" in r.output
    # Corrupt a copy: one flipped byte in an Arrow shard, one truncated tar.
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    arrow = sorted(bad.glob("*.arrow"))[0]
    data = bytearray(arrow.read_bytes())
    data[len(data) // 2] ^= 0xFF
    arrow.write_bytes(bytes(data))
    tar = sorted(bad.glob("*.tar"))[1]
    tar.write_bytes(tar.read_bytes()[:-2048])
    r = CliRunner().invoke(main, ["inspect", str(bad), "--verify"])
    assert r.exit_code == 1
    assert f"{arrow.name}" in r.output and "sha256" in r.output and "2/4 shards ok" in r.output


def test_inspect_without_manifest_is_an_error(tmp_path):
    r = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert r.exit_code == 1 and "no manifest.json" in r.output


def test_vocab_command(tmp_path, demo_corpus):
    r = CliRunner().invoke(
        main,
        [
            "vocab",
            "--input",
            str(demo_corpus / "*.txt"),
            "--format",
            "text",
            "--output",
            str(tmp_path),
            "--vocab-size",
            "1500",
        ],
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "vocab.txt").read_text().count("\n") == 1500
    assert "note:" not in r.output  # 1,500 asked, 1,500 given: nothing to say


def test_a_vocabulary_smaller_than_asked_is_said(tmp_path, demo_corpus):
    args = ["vocab", "--input", str(demo_corpus / "*.txt"), "--format", "text", "--vocab-size", "900000"]
    r = CliRunner().invoke(main, [*args, "--output", str(tmp_path / "v")])
    assert r.exit_code == 0, r.output
    given = (tmp_path / "v" / "vocab.txt").read_text().count("\n")
    assert given < 900_000 and f"note: {given:,} of the 900,000 tokens --vocab-size asked" in r.output
    r = CliRunner().invoke(main, ["vocab", "--input", str(tmp_path / "nothing-*"), "--output", str(tmp_path / "x")])
    assert r.exit_code == 2 and "matches no files" in r.output


def test_documents_the_vocabulary_never_saw_are_said(tmp_path):
    """Lines without the text field and malformed ones were dropped silently: 'from 2 documents' alone."""
    docs = [json.dumps({"text": "a few words"}), json.dumps({"body": "x"}), "{broken", json.dumps({"text": "more"})]
    (tmp_path / "d.jsonl").write_text("\n".join(docs) + "\n")
    args = ["vocab", "--input", str(tmp_path / "d.jsonl"), "--format", "jsonl", "--min-frequency", "1"]
    r = CliRunner().invoke(main, [*args, "--output", str(tmp_path / "v")])
    assert r.exit_code == 0, r.output
    assert "from 2 documents, 0.0 MB read, dropped (malformed_json: 1, missing_text_field: 1) ->" in r.output
    (tmp_path / "d.jsonl").write_text(docs[1] + "\n")
    r = CliRunner().invoke(main, [*args, "--output", str(tmp_path / "w")])
    assert r.exit_code == 1 and "(1 documents, 14 bytes read; dropped: missing_text_field: 1)" in r.output


def test_inspect_verify_checks_the_vocabulary_against_the_manifest(dataset, tmp_path):
    swapped = tmp_path / "swapped"
    shutil.copytree(dataset[0], swapped)
    lines = (swapped / "vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[10], lines[11] = lines[11], lines[10]
    (swapped / "vocab.txt").write_text("\n".join(lines), encoding="utf-8")
    r = CliRunner().invoke(main, ["inspect", str(swapped), "--verify"])
    assert r.exit_code == 1, r.output
    assert "verify vocab.txt: FAILED" in r.output and "sha256" in r.output
    r = CliRunner().invoke(main, ["inspect", str(dataset[0]), "--verify"])
    assert r.exit_code == 0 and "verify vocab.txt: ok" in r.output


def test_inspect_without_vocab_is_a_clean_error(dataset, tmp_path):
    missing = tmp_path / "missing"
    shutil.copytree(dataset[0], missing)
    (missing / "vocab.txt").unlink()
    r = CliRunner().invoke(main, ["inspect", str(missing), "--verify"])
    assert r.exit_code == 1 and "vocab.txt: FAILED" in r.output and "missing" in r.output
    r = CliRunner().invoke(main, ["inspect", str(missing), "--decode", "1"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert r.output.strip().splitlines()[-1].startswith("Error: --decode:") and "vocab.txt" in r.output


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["zero-bytes", "blank-lines"])
def test_empty_input_is_an_error_naming_it(tmp_path, demo_vocab, content):
    empty = tmp_path / "empty.txt"
    empty.write_text(content)
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            str(empty),
            "--vocab",
            str(demo_vocab / "vocab.txt"),
            "--output",
            str(tmp_path / "out"),
            "--dupe-factor",
            "1",
        ],
    )
    assert r.exit_code in (1, 2) and "Error:" in r.output and str(empty) in r.output, r.output
    assert not (tmp_path / "out" / "manifest.json").exists()
    r = CliRunner().invoke(main, ["vocab", "--input", str(empty), "--output", str(tmp_path / "voc")])
    assert r.exit_code == 1 and "no text to train a vocabulary on" in r.output and str(empty) in r.output, r.output
    assert not (tmp_path / "voc" / "vocab.txt").exists()


def test_manifest_input_format_shows_each_inputs_own_format(tmp_path, demo_corpus, demo_vocab):
    from bertstream.pipelines.common.dataset import load_manifest
    from bertstream.schemas import pretraining as P

    sentences = tmp_path / "s.txt"
    sentences.write_text("One sentence here.\nAnother one.\n\nA second document.\nIts end.\n")
    out = tmp_path / "mixed"
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            f"text:{demo_corpus}/a*.txt",
            "--input",
            str(sentences),
            "--vocab",
            str(demo_vocab / "vocab.txt"),
            "--output",
            str(out),
            "--dupe-factor",
            "1",
            "--num-shards",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    m = load_manifest(str(out))
    formats = m.parameters["input_format"]
    assert sorted(formats.values()) == sorted(i["format"] for i in m.inputs)  # one entry per input, by name
    assert set(formats.values()) == {"text", "sentences"}
    assert [f for n, f in formats.items() if n.endswith("/s.txt")] == ["sentences"]
    import pyarrow as pa

    shard = out / m.shards[0].path
    assert P.read_metadata(pa.ipc.open_file(pa.memory_map(str(shard))).schema)["parameters"]["input_format"] == formats
    # All inputs in one format given by prefix: that format, not the --format default.
    r = CliRunner().invoke(
        main,
        [
            "pretraining",
            "--input",
            f"text:{demo_corpus}/a*.txt",
            "--vocab",
            str(demo_vocab / "vocab.txt"),
            "--output",
            str(tmp_path / "one"),
            "--dupe-factor",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    assert load_manifest(str(tmp_path / "one")).parameters["input_format"] == "text"


def test_the_summary_says_the_unk_rate(dataset):
    out, text = dataset
    m = json.loads((out / "manifest.json").read_text())["counters"]
    assert f"[UNK]: {m.get('unk_tokens', 0)} of {m['tokens']} tokens (" in text and "warning" not in text


def test_a_vocabulary_that_does_not_fit_the_text_is_warned_of_naming_its_unknown_words(tmp_path, demo_vocab):
    """An English vocabulary on Chinese text: exit 0 and no word before (issue 53: 8.8% [UNK] went unsaid)."""
    from tests.conftest import shared_path

    lines = shared_path("pretrain", "chinese", "CLUECorpusSmall_bert_sampled.txt").read_text().splitlines()
    (tmp_path / "zh.txt").write_text("\n".join(lines[:300]) + "\n")
    args = ["pretraining", "--input", str(tmp_path / "zh.txt"), "--vocab", str(demo_vocab / "vocab.txt")]
    r = CliRunner().invoke(main, [*args, "--output", str(tmp_path / "ds"), "--dupe-factor", "1"])
    assert r.exit_code == 0, r.output
    warning = r.output.strip().splitlines()[-1]
    assert warning.startswith("warning: ") and "% of the tokens are [UNK]" in warning
    top = json.loads((tmp_path / "ds" / "manifest.json").read_text())["statistics"]["unk_words"]["top"]
    assert f"commonest unknown words: {top[0][0]!r} {top[0][1]}" in warning


@pytest.mark.parametrize("cased_vocab", [False, True], ids=["uncased vocab, --cased", "cased vocab, lowercased"])
def test_a_casing_that_contradicts_the_vocabulary_is_refused(tmp_path, demo_corpus, demo_vocab, cased_vocab):
    """--cased with an uncased vocab.txt made every capitalised word [UNK] (exit 0); lowercased text under a
    cased vocabulary never reaches its capitalised tokens (issue 53)."""
    vocab = demo_vocab / "vocab.txt"
    if cased_vocab:
        args = ["vocab", "--input", str(demo_corpus / "a*.txt"), "--cased", "--vocab-size", "2000"]
        assert CliRunner().invoke(main, [*args, "--output", str(tmp_path / "v")]).exit_code == 0
        vocab = tmp_path / "v" / "vocab.txt"
    flags = [] if cased_vocab else ["--cased"]
    args = ["pretraining", "--input", str(demo_corpus / "a*.txt"), "--vocab", str(vocab), *flags]
    r = CliRunner().invoke(main, [*args, "--output", str(tmp_path / "ds")])
    assert r.exit_code == 2 and not (tmp_path / "ds").exists(), r.output
    said = "a cased vocabulary" if cased_vocab else "holds no token with an uppercase letter"
    assert said in r.output and "--cased" in r.output.splitlines()[-1]
    if cased_vocab:  # the flag that fits runs
        r = CliRunner().invoke(main, [*args, "--cased", "--output", str(tmp_path / "ds"), "--dupe-factor", "1"])
        assert r.exit_code == 0, r.output


def test_arrow_compression_without_arrow_output_is_refused(tmp_path, demo_corpus, demo_vocab):
    """It did nothing and the manifest recorded it as used (issue 53)."""
    args = ["pretraining", "--input", str(demo_corpus / "assert.txt"), "--vocab", str(demo_vocab / "vocab.txt")]
    r = CliRunner().invoke(
        main, [*args, "--output", str(tmp_path / "o"), "--output-format", "webdataset", "--arrow-compression", "lz4"]
    )
    assert r.exit_code == 2 and "'--arrow-compression'" in r.output and "writes no Arrow shards" in r.output
