import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import webdataset

from benchmarks.lib.synthetic_shards import Instances, bert_like_vocab, make_instances, write_arrow, write_dataset
from bertstream.schemas import wds
from bertstream.schemas.manifest import Manifest
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import Vocab
from bertstream.trainer.data.refs import ShardError, ShardRef
from bertstream.trainer.data.shards import ShardData, open_shard
from tests.fuzz import mutate
from tests.trainer.data.conftest import Dataset


def refs(ds: Dataset, fmt: str) -> list[ShardRef]:
    m = Manifest.from_json((ds.path / "manifest.json").read_text())
    return [ShardRef(str(ds.path), 0, s.path, s.format, s.count, s.bytes, s.sha256) for s in m.shards_of(fmt)]


def rows_of(data: ShardData) -> list[dict]:
    out = []
    for block in data.blocks:
        for i in range(len(block)):

            def take(r, i=i):  # noqa: ANN001, ANN202
                return r.values[r.starts[i] : r.starts[i] + r.lengths[i]]

            out.append(
                {
                    "input_ids": take(block.input_ids),
                    "segment_a_length": int(block.segment_a[i]),
                    "masked_lm_positions": take(block.masked_positions),
                    "masked_lm_ids": take(block.masked_ids),
                    "next_sentence_label": int(block.nsp[i]),
                    "instance_id": int(block.instance_id[i]),
                }
            )
    return out


def assert_rows_match(rows: list[dict], inst: Instances) -> None:
    by_id = inst.by_id()
    assert len(rows) == len({r["instance_id"] for r in rows})
    for r in rows:
        want = inst.row(by_id[r["instance_id"]])
        for key, value in want.items():
            np.testing.assert_array_equal(r[key], value, err_msg=key)


def read_all(ds: Dataset, fmt: str, *, vocab: Vocab | None = None) -> list[dict]:
    vocab = vocab or ds.vocab
    out: list[dict] = []
    for ref in refs(ds, fmt):
        out += rows_of(open_shard(ref, verify_sha256=True, vocab_sha256=vocab.sha256, id_type=vocab.id_type))
    return out


@pytest.mark.parametrize("fmt", ["arrow", "webdataset"])
def test_shards_decode_to_the_written_instances(uneven: Dataset, fmt: str) -> None:
    rows = read_all(uneven, fmt)
    assert len(rows) == len(uneven.instances)
    assert_rows_match(rows, uneven.instances)


def test_arrow_record_batches_become_one_block_pointing_into_the_file(uneven: Dataset) -> None:
    ref = refs(uneven, "arrow")[1]  # 120 rows in record batches of 16
    data = open_shard(ref, verify_sha256=False, vocab_sha256=uneven.vocab.sha256, id_type="uint16")
    assert len(data.blocks) == 1 and data.rows == 120
    assert data.blocks[0].input_ids.values.base is not None  # a view, not a copy


@pytest.mark.parametrize("variant", ["stream", "zstd"])
def test_arrow_stream_format_and_compressed_files(tmp_path: Path, vocab: Vocab, variant: str) -> None:
    inst = make_instances(40, seed=2, vocab=vocab)
    path = tmp_path / "x.arrow"
    if variant == "stream":
        write_arrow(path, inst, vocab, {}, rows_per_batch=7, stream=True)
    else:
        table = _table(inst, vocab)
        with pa.ipc.new_file(str(path), table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(table, max_chunksize=9)
    data = path.read_bytes()
    ref = ShardRef(str(tmp_path), 0, "x.arrow", "arrow", 40, len(data), hashlib.sha256(data).hexdigest())
    shard = open_shard(ref, verify_sha256=True, vocab_sha256=vocab.sha256, id_type="uint16")
    assert_rows_match(rows_of(shard), inst)


def test_int32_ids_for_large_vocabularies(tmp_path: Path) -> None:
    vocab = bert_like_vocab(70_000)
    assert vocab.id_type == "int32"
    inst = make_instances(30, seed=3, vocab=vocab)
    assert inst.input_ids.max() > 65_535
    write_dataset(tmp_path, inst, (13, 17), vocab=vocab)
    ds = Dataset(tmp_path, inst, vocab)
    for fmt in ("arrow", "webdataset"):
        rows = read_all(ds, fmt)
        assert len(rows) == 30
        assert_rows_match(rows, inst)


def test_stock_webdataset_reads_the_tar_layout(uneven: Dataset) -> None:
    urls = [str(uneven.path / r.relpath) for r in refs(uneven, "webdataset")]
    samples = [wds.decode_sample(s) for s in webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)]
    assert len(samples) == len(uneven.instances)
    assert_rows_match(samples, uneven.instances)
    ours = read_all(uneven, "webdataset")
    assert [r["instance_id"] for r in ours] == [s["instance_id"] for s in samples]


def test_tar_with_pax_long_names_and_foreign_members(tmp_path: Path, vocab: Vocab) -> None:
    inst = make_instances(3, seed=4, vocab=vocab)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        d = tarfile.TarInfo("some/dir")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        for i in range(3):
            r = inst.row(i)
            payload = wds.encode_instance(
                r["input_ids"],
                r["segment_a_length"],
                r["masked_lm_positions"],
                r["masked_lm_ids"],
                r["next_sentence_label"],
                r["instance_id"],
                2,
            )
            name = ("d" * 120 + "/" if i == 1 else "") + f"{wds.sample_key(r['instance_id'])}.bert"
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload))
            note = tarfile.TarInfo(f"{wds.sample_key(r['instance_id'])}.txt")
            note.size = 2
            tf.addfile(note, io.BytesIO(b"hi"))
    data = buf.getvalue()
    (tmp_path / "x.tar").write_bytes(data)
    ref = ShardRef(str(tmp_path), 0, "x.tar", "webdataset", 3, len(data), hashlib.sha256(data).hexdigest())
    assert_rows_match(rows_of(open_shard(ref, verify_sha256=True, vocab_sha256="", id_type="uint16")), inst)


def _corrupt_copy(ds: Dataset, fmt: str, tmp_path: Path, edit) -> ShardRef:  # noqa: ANN001
    ref = refs(ds, fmt)[1]
    data = bytearray((ds.path / ref.relpath).read_bytes())
    (tmp_path / ref.relpath).write_bytes(edit(data))
    return ShardRef(str(tmp_path), 0, ref.relpath, fmt, ref.count, ref.bytes, ref.sha256)


@pytest.mark.parametrize("fmt", ["arrow", "webdataset"])
def test_truncated_shard_names_path_and_sha256(uneven: Dataset, tmp_path: Path, fmt: str) -> None:
    ref = _corrupt_copy(uneven, fmt, tmp_path, lambda b: bytes(b[: len(b) // 2]))
    with pytest.raises(ShardError, match="truncated") as e:
        open_shard(ref, verify_sha256=False, vocab_sha256=uneven.vocab.sha256, id_type="uint16")
    assert ref.url in str(e.value) and ref.sha256 in str(e.value)
    assert e.value.path == ref.url and e.value.sha256 == ref.sha256


def _flip(at: int):  # noqa: ANN202
    def edit(b: bytearray) -> bytes:
        b[at] ^= 0xFF
        return bytes(b)

    return edit


@pytest.mark.parametrize("fmt", ["arrow", "webdataset"])
def test_flipped_byte_fails_the_sha256(uneven: Dataset, tmp_path: Path, fmt: str) -> None:
    ref = _corrupt_copy(uneven, fmt, tmp_path, _flip(600))
    with pytest.raises(ShardError, match="hashes to") as e:
        open_shard(ref, verify_sha256=True, vocab_sha256=uneven.vocab.sha256, id_type="uint16")
    assert ref.url in str(e.value) and ref.sha256 in str(e.value)


@pytest.mark.parametrize(
    ("at", "match"),
    [
        (5, "checksum"),  # a name byte of the first tar header
        (124, "runs past the end"),  # its size field
        (512 + 2, "bytes, its header says"),  # n of the first payload
        (512 * 3 + 1, "id width 253, expected 2"),  # id width of the second payload
    ],
)
def test_tar_decode_errors_without_sha256_name_path_and_sha(
    uneven: Dataset, tmp_path: Path, at: int, match: str
) -> None:
    ref = _corrupt_copy(uneven, "webdataset", tmp_path, _flip(at))
    with pytest.raises(ShardError, match=match) as e:
        open_shard(ref, verify_sha256=False, vocab_sha256=uneven.vocab.sha256, id_type="uint16")
    assert ref.url in str(e.value) and ref.sha256 in str(e.value)


def test_tar_written_for_another_id_width_is_a_schema_error(uneven: Dataset) -> None:
    ref = refs(uneven, "webdataset")[0]
    with pytest.raises(SchemaError, match="id width 2, the manifest vocab says 4"):
        open_shard(ref, verify_sha256=True, vocab_sha256=uneven.vocab.sha256, id_type="int32")


def test_arrow_decode_error_without_sha256_names_path_and_sha(uneven: Dataset, tmp_path: Path) -> None:
    ref = _corrupt_copy(uneven, "arrow", tmp_path, lambda b: bytes(b[:-12]) + bytes(12))  # footer gone
    with pytest.raises(ShardError, match="does not decode") as e:
        open_shard(ref, verify_sha256=False, vocab_sha256=uneven.vocab.sha256, id_type="uint16")
    assert ref.sha256 in str(e.value)


def test_row_count_must_match_the_manifest(uneven: Dataset) -> None:
    ref = refs(uneven, "arrow")[0]
    wrong = ShardRef(ref.root, 0, ref.relpath, "arrow", ref.count + 1, ref.bytes, ref.sha256)
    with pytest.raises(ShardError, match=f"holds {ref.count} instances, the manifest says {ref.count + 1}"):
        open_shard(wrong, verify_sha256=True, vocab_sha256=uneven.vocab.sha256, id_type="uint16")


def test_shard_schema_version_and_vocab_are_checked(tmp_path: Path, vocab: Vocab) -> None:
    inst = make_instances(10, seed=5, vocab=vocab)
    write_dataset(tmp_path, inst, (10,), vocab=vocab, formats=("arrow",), shard_schema_version=2)
    ref = refs(Dataset(tmp_path, inst, vocab), "arrow")[0]
    with pytest.raises(SchemaError, match="schema version 2"):
        open_shard(ref, verify_sha256=True, vocab_sha256=vocab.sha256, id_type="uint16")
    (tmp_path / "v1").mkdir()
    write_dataset(tmp_path / "v1", inst, (10,), vocab=vocab, formats=("arrow",))
    ref = refs(Dataset(tmp_path / "v1", inst, vocab), "arrow")[0]
    with pytest.raises(ValueError, match="vocab sha256"):
        open_shard(ref, verify_sha256=True, vocab_sha256="0" * 64, id_type="uint16")
    with pytest.raises(SchemaError, match="ids are uint16"):
        open_shard(ref, verify_sha256=True, vocab_sha256=vocab.sha256, id_type="int32")


def _table(inst: Instances, vocab: Vocab) -> pa.Table:
    sink = pa.BufferOutputStream()
    write_arrow(sink, inst, vocab, {}, rows_per_batch=len(inst))
    return pa.ipc.open_file(sink.getvalue()).read_all()


def test_arrow_shard_with_nothing_masked(tmp_path: Path, vocab: Vocab) -> None:
    inst = make_instances(20, seed=6, vocab=vocab, max_masked=0)
    assert inst.masked_counts.sum() == 0
    write_dataset(tmp_path, inst, (20,), vocab=vocab, rows_per_batch=7)
    rows = read_all(Dataset(tmp_path, inst, vocab), "arrow")
    assert len(rows) == 20
    assert_rows_match(rows, inst)


# --- issue 33: every binary reader of ours advances or fails on every malformed header ----------------------


def _pax_tar(records: bytes) -> bytes:
    """A tar whose pax header holds ``records`` as they are, then one .bert member and the end marker."""
    header = tarfile.TarInfo("PaxHeader/x")
    header.type, header.size = tarfile.XHDTYPE, len(records)
    member = tarfile.TarInfo("0000000000000000.bert")
    member.size = 4
    pad = b"\0" * (-len(records) % 512)
    return header.tobuf(tarfile.USTAR_FORMAT) + records + pad + member.tobuf(tarfile.USTAR_FORMAT) + b"\0" * 1536


@pytest.mark.parametrize("fmt", ["webdataset", "arrow"])
def test_malformed_headers_fail_in_one_line(uneven: Dataset, tmp_path: Path, fmt: str) -> None:
    """Mutated headers (tar member headers, the Arrow footer and schema) end in a ShardError or SchemaError (one
    ``Error:`` line each), never in another exception, a hang or an allocation the size of a garbage field."""
    ref = next(r for r in refs(uneven, fmt) if r.count)
    data = (uneven.path / ref.relpath).read_bytes()
    region = 4096 if fmt == "webdataset" else len(data)
    for seed in range(150):
        bad = tmp_path / ref.relpath
        bad.write_bytes(data[-4096:] if fmt == "arrow" and seed % 2 else mutate(data, seed, region))
        tampered = ShardRef(str(tmp_path), 0, ref.relpath, fmt, ref.count, bad.stat().st_size, ref.sha256)
        try:
            open_shard(tampered, verify_sha256=False, vocab_sha256=uneven.vocab.sha256, id_type="uint16")
        except (ShardError, SchemaError):
            pass


@pytest.mark.parametrize(
    "records",
    [b"0 path=x\n", b"-600 path=x\n", b"99999 path=x\n", b"12 size=-1000\n", b"7 x=1\n", b"abc path=x\n"],
)
def test_a_tar_header_that_would_not_advance_fails(records: bytes) -> None:
    """A pax record of length 0 (or a negative one, or a size of -1000) stepped the tar walk back onto
    itself: an endless loop."""
    from bertstream.trainer.data.shards import _walk_tar

    with pytest.raises(ValueError):
        _walk_tar(memoryview(_pax_tar(records)))
