from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.tasks.pipeline import infer_split
from bertstream.schemas import tasks as T
from bertstream.schemas.manifest import MANIFEST_NAME
from tests.conftest import shared_path
from tests.jobs import run_classification, run_ner, run_squad
from tests.pipelines.tasks.conftest import read_rows, shard_digests

TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def test_sst2_dev_rows_labels_shards_and_manifest(sst2_dev, wiki_vocab):
    m, out = sst2_dev
    assert m.kind == "classification" and m.task["split"] == "dev" and m.task["training"] is False
    assert m.task["labels"] == ["0", "1"] and m.task["label_ids"] == {"0": 0, "1": 1} and m.task["labeled"]
    assert m.totals["rows"] == m.counters["rows_used"] == m.counters["rows_read"] == 872
    lines = shared_path("tasks", "sst2", "dev.tsv").read_text().split("\n")[1:-1]
    expected = [int(line.rsplit("\t", 1)[1]) for line in lines]
    assert m.statistics["label_counts"] == {"0": expected.count(0), "1": expected.count(1)}
    assert len(m.shards) == 2 and [s.path for s in m.shards] == [
        "classification-00000-of-00002.arrow",
        "classification-00001-of-00002.arrow",
    ]
    for s in m.shards:
        data = (out / s.path).read_bytes()
        assert len(data) == s.bytes and hashlib.sha256(data).hexdigest() == s.sha256
        schema = pa.ipc.open_file(out / s.path).schema
        assert T.check_schema(schema, T.CLASSIFICATION, T.SEQUENCE_CLASS) == "uint16"
        assert T.read_metadata(schema)["vocab_sha256"] == m.vocab["sha256"] and T.read_metadata(schema)["labels"] == [
            "0",
            "1",
        ]
    rows = read_rows(out, m)
    assert rows.column(T.LABEL).to_pylist() == expected  # input order, across shards
    assert [T.split_row_id(r)[1] for r in rows.column(T.ROW_ID).to_pylist()] == list(range(2, 874))
    assert (out / "vocab.txt").read_bytes() == (wiki_vocab / "vocab.txt").read_bytes()
    assert hashlib.sha256((out / "vocab.txt").read_bytes()).hexdigest() == m.vocab["sha256"]


def test_two_worker_processes_write_byte_identical_shards(sst2_dev, squad_eval, tmp_path, wiki_vocab):
    a = run_classification(
        inputs=[str(shared_path("tasks", "sst2", "dev.tsv"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(tmp_path / "sst2"),
        glue="sst2",
        num_shards=2,
        beam_args=TWO_WORKERS,
    )
    assert shard_digests(tmp_path / "sst2") == shard_digests(sst2_dev[1])
    assert a.manifest.counters == sst2_dev[0].counters and a.manifest.shards == sst2_dev[0].shards
    b = run_squad(
        inputs=[str(shared_path("tasks", "squad_v1.1", "dev-v1.1.json"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(tmp_path / "squad"),
        articles=(40, 48),
        split="dev",
        max_seq_length=128,
        doc_stride=48,
        max_query_length=32,
        num_shards=2,
        beam_args=TWO_WORKERS,
    )
    digests = shard_digests(tmp_path / "squad")
    assert digests == shard_digests(squad_eval[1]) and len(digests) == 3  # 2 shards + examples.jsonl
    assert b.manifest.counters == squad_eval[0].counters and b.manifest.shards == squad_eval[0].shards


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_labels_derived_from_train_then_required_at_evaluation(tmp_path, demo_vocab):
    vocab = str(demo_vocab / "vocab.txt")
    train = write(tmp_path / "train.tsv", "text\tlabel\na good module\tpos\na bad module\tneg\nthe list\tneutral\n")
    m = run_classification(
        inputs=[train], vocab=vocab, output=str(tmp_path / "train"), text_column="text", label_column="label"
    ).manifest
    assert m.task["labels"] == ["neg", "neutral", "pos"] and m.task["label_source"] == "derived"
    assert read_rows(tmp_path / "train", m).column(T.LABEL).to_pylist() == [2, 0, 1]
    dev = write(tmp_path / "dev.tsv", "text\tlabel\nthe module\tpos\nanother one\tpositive\n")
    common = dict(vocab=vocab, text_column="text", label_column="label")
    with pytest.raises(UsageError) as e:  # an evaluation split cannot make up its own ids
        run_classification(inputs=[dev], output=str(tmp_path / "d0"), **common)
    assert e.value.param == "label-set-from"
    with pytest.raises(Exception, match="label 'positive' is not in the label set") as e:
        run_classification(inputs=[dev], output=str(tmp_path / "d1"), label_set_from=str(tmp_path / "train"), **common)
    assert not (tmp_path / "d1" / MANIFEST_NAME).exists()
    ok = write(tmp_path / "dev_ok.tsv", "text\tlabel\nthe module\tpos\nanother one\tneg\n")
    m = run_classification(
        inputs=[ok], output=str(tmp_path / "d2"), split="dev", label_set_from=str(tmp_path / "train"), **common
    ).manifest
    assert m.task["labels"] == ["neg", "neutral", "pos"] and m.task["label_source"] == f"manifest:{tmp_path / 'train'}"
    assert read_rows(tmp_path / "d2", m).column(T.LABEL).to_pylist() == [2, 0]


def test_label_set_from_checks_the_vocab_casing_and_kind(tmp_path, demo_vocab, wiki_vocab, sst2_dev):
    dev = str(shared_path("tasks", "sst2", "dev.tsv"))
    with pytest.raises(UsageError, match="vocab sha256") as e:
        run_classification(
            inputs=[dev],
            vocab=str(demo_vocab / "vocab.txt"),
            output=str(tmp_path / "a"),
            text_column="sentence",
            label_column="label",
            label_set_from=str(sst2_dev[1]),
        )
    assert e.value.param == "vocab"
    # (an uncased vocabulary with --cased is refused before the label set's casing is compared: issue 53)
    with pytest.raises(UsageError, match="--cased, but .* an uncased vocabulary") as e:
        run_classification(
            inputs=[dev],
            vocab=str(wiki_vocab / "vocab.txt"),
            output=str(tmp_path / "b"),
            text_column="sentence",
            label_column="label",
            label_set_from=str(sst2_dev[1]),
            lowercase=False,
        )
    assert e.value.param == "lowercase"
    with pytest.raises(UsageError, match="'classification' dataset, not 'ner'"):
        run_ner(
            inputs=[str(shared_path("tasks", "conll2003", "valid.txt"))],
            vocab=str(wiki_vocab / "vocab.txt"),
            output=str(tmp_path / "c"),
            label_set_from=str(sst2_dev[1]),
        )


def test_explicit_labels_drop_other_training_rows_with_line_numbers(tmp_path, demo_vocab):
    train = write(
        tmp_path / "train.csv",
        'text,label\n"a module, quoted",pos\nsome text,unknown\n,pos\nmore text,neg\ntoo,many,fields\n',
    )
    m = run_classification(
        inputs=[train],
        vocab=str(demo_vocab / "vocab.txt"),
        output=str(tmp_path / "o"),
        text_column="text",
        label_column="label",
        labels=("pos", "neg"),
    ).manifest
    c = m.counters
    assert c["rows_read"] == 5 and c["rows_used"] == 2
    assert c["first_lines"]["rows_dropped.label_not_in_set"] == [f"{train}:3"]
    assert c["first_lines"]["rows_dropped.empty_text"] == [f"{train}:4"]
    assert c["first_lines"]["rows_dropped.wrong_column_count"] == [f"{train}:6"]
    assert m.task["labels"] == ["pos", "neg"] and read_rows(tmp_path / "o", m).column(T.LABEL).to_pylist() == [0, 1]


def test_glue_test_files_are_unlabeled_and_pairs_keep_segments(tmp_path, wiki_vocab):
    m = run_classification(
        inputs=[str(shared_path("tasks", "mrpc", "test.tsv"))],
        vocab=str(wiki_vocab / "vocab.txt"),
        output=str(tmp_path / "t"),
        glue="mrpc",
    ).manifest
    assert m.task["labeled"] is False and m.task["split"] == "test" and m.task["labels"] == ["0", "1"]
    rows = read_rows(tmp_path / "t", m)
    assert rows.num_rows == 1725 and rows.column(T.LABEL).null_count == 1725
    sep = m.vocab["special_ids"]["[SEP]"]
    for r in rows.slice(0, 100).to_pylist():
        assert (
            r["input_ids"][r["segment_a_length"] - 1] == sep
            and r["input_ids"][-1] == sep
            and r["input_ids"].count(sep) == 2
        )


def test_existing_output_needs_overwrite(tmp_path, demo_vocab):
    train = write(tmp_path / "train.tsv", "text\tlabel\na module\tpos\n")
    args = dict(
        inputs=[train],
        vocab=str(demo_vocab / "vocab.txt"),
        output=str(tmp_path / "o"),
        text_column="text",
        label_column="label",
        num_shards=3,
    )
    run_classification(**args)
    with pytest.raises(UsageError, match="--overwrite") as e:
        run_classification(**args)
    assert e.value.param == "output"
    m = run_classification(**{**args, "num_shards": 1}, overwrite=True).manifest
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "classification-00000-of-00001.arrow",
        MANIFEST_NAME,
        "vocab.txt",
    ]
    assert m.totals["rows"] == 1


def test_split_names_come_from_file_names_or_the_flag():
    assert infer_split(["/d/train.tsv", "/d/train-part2.tsv"]) == "train"
    assert infer_split(["/glue/MNLI/dev_mismatched.tsv"]) == "dev_mismatched"
    assert infer_split(["/squad/dev-v1.1.json"]) == "dev"
    assert infer_split(["conll/valid.txt"]) == "valid"
    for names in (["a/train.tsv", "a/dev.tsv"], ["a/data.tsv"]):
        with pytest.raises(UsageError) as e:
            infer_split(names)
        assert e.value.param == "split"


def test_unknown_tag_at_evaluation_stops_the_run(tmp_path, demo_vocab):
    train = write(tmp_path / "train.txt", "Guido NNP B-NP B-PER\nwrote VBD B-VP O\nPython NNP B-NP B-MISC\n")
    run_ner(inputs=[train], vocab=str(demo_vocab / "vocab.txt"), output=str(tmp_path / "tr"))
    dev = write(tmp_path / "dev.txt", "Guido NNP B-NP B-PER\n\nin IN B-PP O\nAmsterdam NNP B-NP B-LOC\n")
    with pytest.raises(Exception, match="dev.txt:4: label 'B-LOC' is not in the label set"):
        run_ner(
            inputs=[dev],
            vocab=str(demo_vocab / "vocab.txt"),
            output=str(tmp_path / "dv"),
            label_set_from=str(tmp_path / "tr"),
        )
    assert not (tmp_path / "dv" / MANIFEST_NAME).exists()


def test_glue_cola_headerless_and_stsb_regression(tmp_path, demo_vocab):
    vocab = str(demo_vocab / "vocab.txt")
    cola = write(
        tmp_path / "train.tsv",
        "gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tThey drank the pub.\ngj04\t1\n",
    )  # a short row: counted, not fatal
    m = run_classification(inputs=[cola], vocab=vocab, output=str(tmp_path / "cola"), glue="cola").manifest
    assert m.task["columns"]["header"] is False and m.task["labels"] == ["0", "1"]
    assert read_rows(tmp_path / "cola", m).column(T.LABEL).to_pylist() == [1, 0]
    assert m.counters["first_lines"]["rows_dropped.wrong_column_count"] == [f"{cola}:3"]
    stsb = write(
        tmp_path / "dev.tsv",
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
        "0\tmain\tf\t2012\t1\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000\n"
        "1\tmain\tf\t2012\t4\tnone\tnone\tA man plays a flute.\tA man plays a bamboo flute.\t3.800\n",
    )
    m = run_classification(inputs=[stsb], vocab=vocab, output=str(tmp_path / "stsb"), glue="stsb").manifest
    assert m.kind == "regression" and m.task["labels"] == [] and m.task["label_source"] == "none"
    rows = read_rows(tmp_path / "stsb", m)
    assert rows.schema.field(T.LABEL).type == pa.float32()
    assert rows.column(T.LABEL).to_pylist() == pytest.approx([5.0, 3.8])


def test_a_task_input_without_rows_publishes_no_dataset(tmp_path, demo_vocab):
    """What is read is what is meant (issue 33): a header-only TSV published a 0-row dataset, on which
    finetune then failed in Arrow."""
    from bertstream.pipelines.common.files import InputError

    train = write(tmp_path / "train.tsv", "text\tlabel\n")
    with pytest.raises(InputError, match="train.tsv: no rows \\(0 rows read; none dropped\\)"):
        run_classification(
            inputs=[train],
            vocab=str(demo_vocab / "vocab.txt"),
            output=str(tmp_path / "o"),
            text_column="text",
            label_column="label",
            num_shards=1,
        )
    assert not (tmp_path / "o" / MANIFEST_NAME).exists()


def test_a_task_worker_tokenizes_on_one_thread_whatever_its_process_set_before(wiki_vocab, monkeypatch):
    # A worker forked (by the fork server) from a process whose in-process pretraining run had set
    # TOKENIZERS_PARALLELISM=true inherited its Rayon pool without the pool's threads: the task featurizer kept
    # "true" (it only defaulted the variable) and its first encode_batch waited forever (this file's two-worker
    # test hung when run in one process after tests/test_shard_pins.py).
    import os

    from bertstream.pipelines.tasks.features import TaskTokenizer
    from bertstream.pipelines.tokenizer.load import load_tokenizer

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    tokenizer = TaskTokenizer(load_tokenizer(str(wiki_vocab / "vocab.txt")))
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert [len(ids) > 0 for ids in tokenizer.ids(["hello world", "a"])] == [True, True]
