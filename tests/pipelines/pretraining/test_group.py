"""The document shuffle by reference: spill files, group plans and pools, on the real pydoc corpus."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bertstream.pipelines.common.spill import keys_per_block, write_file
from bertstream.pipelines.inputs.read import DocumentBatch, read_documents
from bertstream.pipelines.pretraining.group import (
    encode_documents,
    group_of,
    group_parts,
    groups_of,
    num_groups,
    plan_parts,
    read_group,
)
from bertstream.pipelines.pretraining.instances import Pool, document_key
from bertstream.pipelines.pretraining.segment import segment_documents
from bertstream.pipelines.pretraining.tokenize import DocumentTokenizer
from bertstream.pipelines.tokenizer.load import load_tokenizer
from bertstream.schemas.hashing import mix64_array

SEED = 11


@pytest.fixture(scope="module")
def batches(demo_corpus, demo_vocab):
    """The pydoc corpus tokenized as several batches of a few files each, as the Tokenize stage yields them."""
    tok = DocumentTokenizer(load_tokenizer(str(demo_vocab / "vocab.txt")))
    files = sorted(demo_corpus.glob("*.txt"))
    out = []
    for i in range(0, len(files), 7):
        docs = [d for f in files[i : i + 7] for d in read_documents(str(f), "text", Counter())]
        out.append(tok(segment_documents(DocumentBatch(docs))[0], Counter()))
    return out


def spill(batches, work, name: str) -> str:
    keys, chunks = encode_documents(batches, SEED)
    path = str(work / f"{name}.bin")
    write_file(path, chunks)
    return path


def expected_pools(batches, groups: int) -> dict[int, Pool]:
    """Each group's pool built directly from every document, without spill files."""
    keys = np.asarray([document_key(SEED, d) for b in batches for d in b.doc_ids], dtype=np.uint64)
    gid = np.asarray([group_of(int(k), groups) for k in keys.tolist()])
    doc_sent = np.concatenate([b.doc_sentences for b in batches])
    sent_lens = np.concatenate([b.sentence_lengths for b in batches])
    ids = np.concatenate([b.ids for b in batches])
    sent_end = np.cumsum(doc_sent)
    tok_end = np.concatenate(([0], np.cumsum(sent_lens)))
    pools = {}
    for g in np.unique(gid).tolist():
        docs = np.flatnonzero(gid == g)
        sents = np.concatenate([np.arange(sent_end[d] - doc_sent[d], sent_end[d]) for d in docs])
        toks = np.concatenate([ids[tok_end[s] : tok_end[s + 1]] for s in sents])
        pools[g] = Pool.build(keys[docs], doc_sent[docs], sent_lens[sents], toks)
    return pools


def assert_same_pool(a: Pool, b: Pool) -> None:
    for f in ("doc_keys", "doc_sent", "sent_tok", "ids"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_group_of_is_a_range_of_the_mixed_key_and_vectorised_alike():
    keys = np.asarray([document_key(SEED, f"doc{i}") for i in range(5000)], dtype=np.uint64)
    for groups in (1, 2, 7, 1000):
        scalar = [group_of(int(k), groups) for k in keys.tolist()]
        assert groups_of(mix64_array(keys), groups).tolist() == scalar
        assert min(scalar) >= 0 and max(scalar) < groups
    # Non-decreasing along the mixed order: a group is one contiguous run of a spill file.
    mixed = np.sort(mix64_array(keys))
    assert (np.diff(groups_of(mixed, 7).astype(np.int64)) >= 0).all()
    counts = np.bincount(groups_of(mix64_array(keys), 7).astype(np.int64))
    assert counts.min() > 0.8 * len(keys) / 7  # ranges of a uniform hash: balanced groups


def parts_by_group(paths: list[str], groups: int) -> dict[int, list]:
    """What BuildPool sees: the block references of every file, unpacked per group."""
    blocks: dict[int, list] = {}
    for path in paths:
        for b, part in plan_parts(path, groups):
            blocks.setdefault(b, []).append(part)
    k = keys_per_block(groups)
    out = {}
    for b, ps in blocks.items():
        for i in range(k):
            if b * k + i < groups and (found := group_parts(ps, i)):
                out[b * k + i] = found
    return out


@pytest.mark.parametrize("groups,max_blocks", [(1, 256), (3, 256), (8, 256), (8, 3), (7, 2)])
@pytest.mark.parametrize("files", [1, 2, 5])
def test_pools_from_spill_files_equal_pools_built_from_all_documents(
    tmp_path, batches, groups, files, max_blocks, monkeypatch
):
    import bertstream.pipelines.common.spill as spill_module

    monkeypatch.setattr(spill_module, "MAX_BLOCKS", max_blocks)  # blocks of several groups
    cut = np.array_split(np.arange(len(batches)), files)
    paths = [spill([batches[i] for i in part], tmp_path, f"s{k}") for k, part in enumerate(cut) if len(part)]
    assert all(len(list(plan_parts(p, groups))) <= max_blocks for p in paths)
    parts = parts_by_group(paths, groups)
    expected = expected_pools(batches, groups)
    assert sorted(parts) == sorted(expected)
    for g, ps in parts.items():
        assert_same_pool(read_group(ps[::-1]), expected[g])  # any order of parts
    assert sum(expected[g].num_docs for g in expected) == sum(len(b.doc_ids) for b in batches)


def test_a_retried_spill_rewrites_the_same_bytes_under_the_same_name(tmp_path, batches):
    from bertstream.pipelines.pretraining.group import _SpillDocumentsFn

    outs = []
    for attempt in ("a", "b"):
        fn = _SpillDocumentsFn(str(tmp_path / attempt), SEED)
        (tmp_path / attempt).mkdir()
        fn.start_bundle()
        for b in batches[:4]:
            list(fn.process(b))
        (path,) = [w.value for w in fn.finish_bundle()]
        outs.append((path.rsplit("/", 1)[1], open(path, "rb").read()))
    assert outs[0] == outs[1]


def test_the_spill_buffer_writes_a_file_whenever_it_is_full(tmp_path, batches):
    from bertstream.pipelines.pretraining.group import _SpillDocumentsFn

    fn = _SpillDocumentsFn(str(tmp_path), SEED)
    fn.spill_bytes = 1  # every batch fills it
    fn.start_bundle()
    paths = [p for b in batches for p in fn.process(b)] + [w.value for w in fn.finish_bundle()]
    assert len(paths) == len([b for b in batches if b.doc_ids]) and len(set(paths)) == len(paths)
    docs = sum(p.num_docs for p in expected_pools(batches, 1).values())
    assert sum(read_group(parts_by_group([p], 1)[0]).num_docs for p in paths) == docs


def test_truncated_spill_file_is_an_error_naming_it(tmp_path, batches):
    path = spill(batches[:2], tmp_path, "t")
    (part,) = parts_by_group([path], 1)[0]
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(OSError, match="truncated spill file"):
        read_group([part])


def test_num_groups_bounds_documents_and_tokens():
    assert num_groups(10, 100, 2000, 10_000) == 1
    assert num_groups(4001, 100, 2000, 10_000) == 3
    assert num_groups(10, 25_000, 2000, 10_000) == 3
