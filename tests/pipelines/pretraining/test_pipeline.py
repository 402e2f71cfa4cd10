from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import webdataset

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
from bertstream.schemas import pretraining as P
from bertstream.schemas import wds
from bertstream.schemas.manifest import MANIFEST_NAME, vocab_entry
from bertstream.schemas.vocab import Vocab, VocabError, is_reserved
from tests.conftest import shared_path


def run(inputs, vocab, out, **kw):
    beam_args = kw.pop("beam_args", [])
    overwrite = kw.pop("overwrite", False)
    cfg = PretrainingConfig(**{"input_format": "text", "dupe_factor": 2, "num_shards": 3, **kw})
    return run_pretraining(
        PretrainingJob(
            inputs=tuple([str(i) for i in inputs]),
            vocab=str(vocab),
            output=str(out),
            config=cfg,
            beam_args=tuple(beam_args or ()),
            overwrite=overwrite,
        )
    )


def shard_digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("pretrain-*"))}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, demo_corpus, demo_vocab):
    out = tmp_path_factory.mktemp("demo_out")
    result = run([demo_corpus / "*.txt"], demo_vocab / "vocab.txt", out, output_format="both")
    return result, out


def test_manifest_describes_every_shard_and_reconciles(demo_run, demo_vocab):
    result, out = demo_run
    m = result.manifest
    assert m.kind == "pretraining" and m.schema_version == 1
    assert len(m.shards_of("arrow")) == 3 and len(m.shards_of("webdataset")) == 3
    for s in m.shards:
        data = (out / s.path).read_bytes()
        assert len(data) == s.bytes and hashlib.sha256(data).hexdigest() == s.sha256
    c = m.counters
    assert c[C.DOCUMENTS_READ] == c[C.DOCUMENTS_USED] + sum(C.dropped(c).values()) == 79
    assert sum(s.count for s in m.shards_of("arrow")) == m.totals["instances"] == c[C.INSTANCES] > 1000
    assert (out / "vocab.txt").read_text() == (demo_vocab / "vocab.txt").read_text()
    assert m.vocab["sha256"] == hashlib.sha256((out / "vocab.txt").read_bytes()).hexdigest()
    # The writer's vocab entry is the one schemas.manifest.vocab_entry describes.
    vocab = Vocab.load(out / "vocab.txt")
    assert m.vocab == vocab_entry(vocab, lowercase=m.vocab["lowercase"], source=m.vocab["source"])
    assert m.statistics["masked_positions_per_instance"]["count_rule_violations"] == 0
    assert not (out / "_work").exists()
    assert m.parameters["dupe_factor"] == 2 and m.inputs and m.seed == 12345


def test_arrow_and_webdataset_hold_the_same_instances(demo_run):
    result, out = demo_run
    m = result.manifest
    rows = {}
    for s in m.shards_of("arrow"):
        reader = pa.ipc.open_file(out / s.path)
        assert P.check_schema(reader.schema) == "uint16"
        assert P.read_metadata(reader.schema)["vocab_sha256"] == m.vocab["sha256"]
        for r in reader.read_all().to_pylist():
            rows[r["instance_id"]] = r
    urls = [str(out / s.path) for s in m.shards_of("webdataset")]
    n = 0
    for sample in webdataset.WebDataset(urls, shardshuffle=False):  # the stock library, no decoding, no pickle
        d = wds.decode_sample(sample)
        r = rows[d["instance_id"]]
        assert d["input_ids"].tolist() == r["input_ids"]
        assert d["masked_lm_positions"].tolist() == r["masked_lm_positions"]
        assert d["masked_lm_ids"].tolist() == r["masked_lm_ids"]
        assert (d["segment_a_length"], d["next_sentence_label"]) == (r["segment_a_length"], r["next_sentence_label"])
        n += 1
    assert n == len(rows)


def test_instances_are_well_formed(demo_run, demo_vocab):
    result, out = demo_run
    m = result.manifest
    sp = m.vocab["special_ids"]
    table = pa.concat_tables(pa.ipc.open_file(out / s.path).read_all() for s in m.shards_of("arrow"))
    vocab_tokens = (out / "vocab.txt").read_text().split("\n")
    for r in table.slice(0, 500).to_pylist():
        ids, a = r["input_ids"], r["segment_a_length"]
        assert ids[0] == sp["[CLS]"] and ids[a - 1] == sp["[SEP]"] and ids[-1] == sp["[SEP]"]
        assert 5 <= len(ids) <= 128 and 3 <= a <= len(ids) - 2
        assert sp["[PAD]"] not in ids
        for p, orig in zip(r["masked_lm_positions"], r["masked_lm_ids"]):
            assert p not in (0, a - 1, len(ids) - 1)
            assert not is_reserved(vocab_tokens[orig])
    # Shards are shuffled: consecutive rows come from unrelated documents (ids are not sorted).
    iids = table.column("instance_id").to_numpy()
    assert not (np.diff(iids.astype(np.float64)) > 0).all()


def test_many_small_spill_files_give_the_same_shards(tmp_path, demo_corpus, demo_vocab, monkeypatch):
    """Both shuffles carry references to spill files; how many there are, and how many shards one reference
    covers, must not change a byte."""
    import bertstream.pipelines.common.spill as spill_module

    files = sorted(demo_corpus.glob("*.txt"))
    run(files, demo_vocab / "vocab.txt", tmp_path / "a", dupe_factor=2, docs_per_group=8)
    monkeypatch.setattr(spill_module, "SPILL_BYTES", 16 << 10)
    monkeypatch.setattr(spill_module, "MAX_BLOCKS", 2)  # 3 shards and 6+ groups: blocks of 2 and more
    run(files, demo_vocab / "vocab.txt", tmp_path / "b", dupe_factor=2, docs_per_group=8)
    assert shard_digests(tmp_path / "a") == shard_digests(tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / MANIFEST_NAME).read_text())
    assert manifest["statistics"]["groups"]["count"] > 3
    assert not (tmp_path / "b" / "_work").exists()


def test_same_shards_wherever_the_corpus_lives(tmp_path, demo_corpus, demo_vocab):
    files = sorted(demo_corpus.glob("*.txt"))[:20]
    moved = tmp_path / "elsewhere" / "deeper"
    moved.mkdir(parents=True)
    for f in files:
        shutil.copy(f, moved / f.name)
    run(files, demo_vocab / "vocab.txt", tmp_path / "a", dupe_factor=1)
    run(sorted(moved.glob("*.txt")), demo_vocab / "vocab.txt", tmp_path / "b", dupe_factor=1)
    assert shard_digests(tmp_path / "a") == shard_digests(tmp_path / "b")


def test_seed_changes_the_instances(tmp_path, demo_corpus, demo_vocab):
    files = sorted(demo_corpus.glob("*.txt"))[:20]
    run(files, demo_vocab / "vocab.txt", tmp_path / "a", dupe_factor=1, seed=1)
    run(files, demo_vocab / "vocab.txt", tmp_path / "b", dupe_factor=1, seed=2)
    assert shard_digests(tmp_path / "a") != shard_digests(tmp_path / "b")


def test_bad_input_is_counted_never_lost(tmp_path, demo_vocab):
    d = tmp_path / "in"
    d.mkdir()
    (d / "empty.txt").write_bytes(b"")
    (d / "blank.txt").write_bytes(b"\n\n   \n\x00\x01\n")  # nothing left after cleaning: empty
    (d / "invisible.txt").write_text("\u200b\u200b \u200d", encoding="utf-8")  # text without tokens
    (d / "one_sentence.txt").write_text("Only one sentence lives here.", encoding="utf-8")
    (d / "invalid.txt").write_bytes(b"Bytes \xff\xfe that are not UTF-8. Another sentence follows here.\n")
    (d / "long_line.txt").write_bytes(b"A sentence that goes on " + b"and on " * 700_000 + b"until the end.")
    (d / "controls.txt").write_bytes(b"Tab\tand bell\x07 and NUL\x00 inside. Second sentence.\r\n")
    (d / "cjk.txt").write_text("这是中文句子。这是第二个句子！", encoding="utf-8")
    (d / "long_word.txt").write_text("A " + "x" * 150 + " word. And more text.", encoding="utf-8")
    out = tmp_path / "out"
    m = run([d / "*.txt"], demo_vocab / "vocab.txt", out, dupe_factor=1).manifest
    c = m.counters
    assert c[C.DOCUMENTS_READ] == 9
    assert C.dropped(c) == {C.EMPTY: 2, C.NO_TOKENS: 1}
    assert c[C.DOCUMENTS_USED] == 6
    assert c[C.INVALID_UTF8] == 2 and c[C.CONTROL_CHARS] >= 4
    assert c[C.SINGLE_SENTENCE_DOCS] >= 1
    assert m.totals["instances"] > 6  # the 5 MB line alone gives hundreds


def test_corrupt_gzip_fails_the_run_and_writes_no_manifest(tmp_path, demo_corpus, demo_vocab):
    good = tmp_path / "good.txt"
    shutil.copy(sorted(demo_corpus.glob("*.txt"))[0], good)
    bad = tmp_path / "bad.txt.gz"
    data = gzip.compress(("A sentence. " * 50000).encode())
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(Exception, match="bad.txt.gz"):
        run([good, bad], demo_vocab / "vocab.txt", tmp_path / "out")
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()
    assert not (tmp_path / "out" / "_work").exists() and not list((tmp_path / "out").glob("pretrain-*"))


def test_errors_before_the_pipeline_starts(tmp_path, demo_corpus, demo_vocab):
    inputs = [demo_corpus / "assert.txt"]
    with pytest.raises(VocabError, match="nope.txt: cannot read vocabulary"):
        run(inputs, tmp_path / "nope.txt", tmp_path / "o1")
    bad = tmp_path / "vocab.txt"
    bad.write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    with pytest.raises(VocabError, match="lacks special token"):
        run(inputs, bad, tmp_path / "o2")
    with pytest.raises(UsageError, match="matches no files"):
        run([tmp_path / "missing-*.txt"], demo_vocab / "vocab.txt", tmp_path / "o3")
    with pytest.raises(UsageError, match="multi_threading"):
        run(inputs, demo_vocab / "vocab.txt", tmp_path / "o4", beam_args=["--direct_running_mode=multi_threading"])
    assert not any((tmp_path / o).exists() and any((tmp_path / o).glob("pretrain-*")) for o in ("o1", "o2", "o3", "o4"))


def test_existing_output_is_refused_without_overwrite(tmp_path, demo_corpus, demo_vocab):
    inputs = [demo_corpus / "assert.txt", demo_corpus / "assignment.txt"]
    run(inputs, demo_vocab / "vocab.txt", tmp_path / "out", dupe_factor=1)
    with pytest.raises(UsageError, match="already holds a dataset"):
        run(inputs, demo_vocab / "vocab.txt", tmp_path / "out", dupe_factor=1)
    m = run(inputs, demo_vocab / "vocab.txt", tmp_path / "out", dupe_factor=1, num_shards=2, overwrite=True).manifest
    assert sorted(p.name for p in (tmp_path / "out").glob("pretrain-*")) == [s.path for s in m.shards]


def test_an_overwrite_refused_after_publishing_puts_the_earlier_dataset_back(tmp_path, demo_corpus, demo_vocab):
    # Round 9: the Finalize stage removed the run's work folder whole, with the earlier dataset --overwrite had set
    # aside there; a run refused once published (no instances) deleted it and said "they are in .../previous".
    from bertstream.pipelines.common.files import InputError

    out = tmp_path / "out"
    run([demo_corpus / "assert.txt"], demo_vocab / "vocab.txt", out, dupe_factor=1)
    earlier = {p.name: p.read_bytes() for p in out.iterdir()}
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n\n")
    with pytest.raises(InputError, match="no instances"):
        run([blank], demo_vocab / "vocab.txt", out, dupe_factor=1, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == earlier


def test_manifest_json_is_plain_json(demo_run):
    _, out = demo_run
    d = json.loads((out / MANIFEST_NAME).read_text())
    assert d["format"] == "bertstream.manifest" and d["statistics"]["next_sentence"]["not_next"] > 0.4


def mixed_real_inputs() -> list[str]:
    """One file of each splittable format, each ~1 MB, in one run (formats by prefix)."""
    return [
        "wikiextractor:" + str(shared_path("pretrain", "wikipedia", "wiki_00")),
        "sentences:" + str(shared_path("pretrain", "sample_text.txt")),
        "jsonl:" + str(shared_path("pretrain", "chinese", "wiki_zh_2019", "wiki_00")),
    ]


def run_with_range_bytes(monkeypatch, range_bytes, out, vocab, inputs=None, **kw):
    import bertstream.pipelines.pretraining.pipeline as pretraining

    monkeypatch.setattr(pretraining, "range_bytes_for", lambda total: range_bytes)
    return run(inputs or mixed_real_inputs(), vocab, out, dupe_factor=1, output_format="both", **kw).manifest


def test_same_shards_whatever_the_read_range_size(tmp_path, monkeypatch, demo_vocab):
    import bertstream.pipelines.inputs.read as read

    ranges_read = []  # the in-process runner calls the module's read_range: count the ranges it reads
    real_read_range = read.read_range
    monkeypatch.setattr(read, "read_range", lambda r, *a: (ranges_read.append(r), real_read_range(r, *a))[1])
    vocab = demo_vocab / "vocab.txt"
    whole = run_with_range_bytes(monkeypatch, 1 << 30, tmp_path / "whole", vocab)
    assert len(ranges_read) == 3
    for range_bytes, n_ranges in ((4_000, 262 + 2 + 259), (300_000, 4 + 1 + 4)):
        ranges_read.clear()
        m = run_with_range_bytes(monkeypatch, range_bytes, tmp_path / str(range_bytes), vocab)
        assert len(ranges_read) == n_ranges
        assert shard_digests(tmp_path / str(range_bytes)) == shard_digests(tmp_path / "whole")
        assert [(s.path, s.sha256) for s in m.shards] == [(s.path, s.sha256) for s in whole.shards]
        assert m.counters == whole.counters and m.statistics == whole.statistics
    c = whole.counters
    assert c[C.FILES_READ] == 3 and c[C.DOCUMENTS_READ] == 38 + 3 + 222 and c[C.INSTANCES] > 1000
    # Two worker processes, the inputs given in the other order, read in ranges: the same bytes, Arrow and
    # WebDataset, and each worker loaded the fast tokenizer itself (a worker that fell back would be named).
    two = run_with_range_bytes(
        monkeypatch,
        50_000,
        tmp_path / "two",
        vocab,
        inputs=mixed_real_inputs()[::-1],
        beam_args=["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
    )
    assert (
        shard_digests(tmp_path / "two") == shard_digests(tmp_path / "whole")
        and len(shard_digests(tmp_path / "two")) == 6
    )
    assert two.counters == whole.counters and two.statistics == whole.statistics
    assert two.run["tokenizer"] == whole.run["tokenizer"] and "fallback_documents" not in two.run["tokenizer"]
