"""The data people have today, end to end through ``bertprep``: the shared enwiki dump (``mediawiki:``), the same
dump as a multistream file split across worker processes, Parquet files and ``datasets`` folders; and the bad
inputs, each one ``Error:`` line naming the file with nothing published."""

from __future__ import annotations

import bz2
import hashlib
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from bertstream.pipelines.cli import main
from bertstream.pipelines.common.dataset_run import load_manifest
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
from bertstream.pipelines.pretraining.read import file_ranges, range_bytes_for
from tests.conftest import shared_path
from tests.pipelines.pretraining.dump_files import DUMP, multistream


@pytest.fixture(scope="module")
def dump() -> Path:
    return shared_path(*DUMP)


@pytest.fixture(scope="module")
def dump_vocab(tmp_path_factory, dump) -> Path:
    out = tmp_path_factory.mktemp("dump_vocab")
    r = CliRunner().invoke(
        main, ["vocab", "--input", f"mediawiki:{dump}", "--output", str(out), "--vocab-size", "6000"]
    )
    assert r.exit_code == 0, r.output
    assert "from 106 documents" in r.output  # the articles, not the redirects
    return out


def digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("pretrain-*"))}


def test_pretraining_reads_the_dump_as_published(tmp_path, dump, dump_vocab):
    out = tmp_path / "shards"
    args = ["pretraining", "--input", f"mediawiki:{dump}", "--vocab", str(dump_vocab / "vocab.txt")]
    r = CliRunner().invoke(main, [*args, "--output", str(out), "--dupe-factor", "1", "--num-shards", "2"])
    assert r.exit_code == 0, r.output
    m = load_manifest(str(out))
    c = m.counters
    assert (c["documents_read"], c["documents_used"]) == (206, 105)
    # Each skip counted by its reason; the one article of lists only has no prose and is dropped as empty.
    drops = {k: v for k, v in c.items() if k.startswith("documents_dropped.")}
    assert drops == {
        "documents_dropped.redirect": 99,
        "documents_dropped.not_article_namespace": 1,
        "documents_dropped.empty": 1,
    }
    assert m.parameters["input_format"] == "mediawiki" and m.totals["instances"] > 1000
    assert "documents: 206 read, 105 used, 101 dropped (empty: 1, not_article_namespace: 1, redirect: 99)" in r.output


def test_a_multistream_dump_gives_the_same_shards_on_two_worker_processes(tmp_path, dump, dump_vocab):
    data, offsets = multistream(bz2.decompress(dump.read_bytes()), pages_per_stream=5)
    path = tmp_path / "enwiki-multistream.xml.bz2"
    path.write_bytes(data)
    ranges = file_ranges(str(path), "mediawiki", path.name, len(data), range_bytes_for(len(data)))
    assert len(ranges) >= 2 and {r.start for r in ranges} <= set(offsets)  # split at stream boundaries
    cfg = PretrainingConfig(input_format="mediawiki", dupe_factor=1, num_shards=2)
    vocab = str(dump_vocab / "vocab.txt")
    two = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")
    a = run_pretraining(PretrainingJob(inputs=(str(path),), vocab=vocab, output=str(tmp_path / "a"), config=cfg))
    b = run_pretraining(
        PretrainingJob(inputs=(str(path),), vocab=vocab, output=str(tmp_path / "b"), config=cfg, beam_args=two)
    )
    assert len(digests(tmp_path / "a")) == 2 and digests(tmp_path / "a") == digests(tmp_path / "b")
    assert a.manifest.counters == b.manifest.counters
    assert a.manifest.counters["documents_used"] == 105


def _bad_inputs(tmp_path: Path, dump: Path) -> dict[str, tuple[str, str]]:
    """name -> (--input, what the error says)"""
    (tmp_path / "cut.xml.bz2").write_bytes(dump.read_bytes()[:700_000])
    (tmp_path / "feed.xml").write_text(
        '<?xml version="1.0"?>\n<rss version="2.0"><channel><title>x</title></channel></rss>\n'
    )
    pq.write_table(pa.table({"content": ["Some text."] * 20}), tmp_path / "content.parquet")
    data = (tmp_path / "content.parquet").read_bytes()
    (tmp_path / "footer.parquet").write_bytes(data[:-8] + b"\xff\xff\xff\x7fPAR1")
    return {
        "truncated bz2": (f"mediawiki:{tmp_path}/cut.xml.bz2", "truncated"),
        "XML that is no MediaWiki export": (f"mediawiki:{tmp_path}/feed.xml", "not a MediaWiki XML export"),
        "Parquet without the text column": (
            f"parquet:{tmp_path}/content.parquet",
            "no column 'text' (its columns: content)",
        ),
        "corrupt Parquet footer": (f"parquet:{tmp_path}/footer.parquet", "not a readable Parquet file"),
    }


@pytest.mark.parametrize(
    "case",
    ["truncated bz2", "XML that is no MediaWiki export", "Parquet without the text column", "corrupt Parquet footer"],
)
@pytest.mark.parametrize("command", ["pretraining", "vocab"])
def test_a_bad_input_is_one_error_line_naming_the_file_and_nothing_is_published(
    tmp_path, dump, dump_vocab, case, command
):
    source, says = _bad_inputs(tmp_path, dump)[case]
    out = tmp_path / "out"
    args = [command, "--input", source, "--output", str(out)]
    if command == "pretraining":
        args += ["--vocab", str(dump_vocab / "vocab.txt"), "--dupe-factor", "1"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and says in errors[0] and source.split(":", 1)[1] in errors[0], r.output
    assert "Traceback" not in r.output
    assert not (out / "manifest.json").exists() and not (out / "vocab.txt").exists()


@pytest.fixture(scope="module")
def same_text(tmp_path_factory, demo_corpus) -> dict[str, str]:
    """The pydoc corpus as records (id, title, text), as JSON lines, Parquet and a ``save_to_disk`` folder."""
    d = tmp_path_factory.mktemp("same_text")
    rows = [
        {"id": p.stem, "title": p.stem.replace("_", " "), "text": p.read_text(encoding="utf-8")}
        for p in sorted(demo_corpus.glob("[a-c]*.txt"))
    ]
    (d / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(rows), d / "corpus.parquet", row_group_size=4)
    datasets.Dataset.from_list(rows).save_to_disk(str(d / "saved"), max_shard_size="100KB")
    return {"jsonl": f"jsonl:{d}/corpus.jsonl", "parquet": f"parquet:{d}/corpus.parquet", "arrow": f"arrow:{d}/saved"}


def test_parquet_arrow_and_json_lines_of_the_same_text_give_the_same_sentences_and_tokens(
    tmp_path, same_text, demo_vocab
):
    counts = {}
    for kind, source in same_text.items():
        out = tmp_path / kind
        args = ["pretraining", "--input", source, "--vocab", str(demo_vocab / "vocab.txt"), "--output", str(out)]
        r = CliRunner().invoke(main, [*args, "--dupe-factor", "1", "--num-shards", "1"])
        assert r.exit_code == 0, r.output
        c = load_manifest(str(out)).counters
        counts[kind] = {k: c[k] for k in ("documents_read", "documents_used", "sentences", "tokens")}
    assert counts["jsonl"]["documents_used"] > 10
    assert counts["parquet"] == counts["jsonl"] == counts["arrow"]
