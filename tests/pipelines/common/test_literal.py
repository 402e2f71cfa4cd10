"""An output path is a path, never a pattern (issue 53, item 1): Beam's ``match`` and its local and GCS ``delete``
read ``[``, ``]``, ``*`` and ``?`` as a glob; ``bertstream.pipelines.common.literal`` lists and deletes by name."""

from __future__ import annotations

import json
import os
import re

import pytest
from apache_beam.io.filesystems import FileSystems
from click.testing import CliRunner

from bertstream.pipelines.cli import main
from bertstream.pipelines.common import literal
from bertstream.pipelines.common import output_dir as O
from bertstream.pipelines.pretraining import pipeline as pretraining
from bertstream.schemas.manifest import MANIFEST_NAME
from tests.conftest import shared_path

# Every glob character Beam knows, and braces, which some shells and libraries expand.
NAME = "exp[lr=1e-4]*?{a,b}"


def test_a_pattern_of_a_name_escapes_to_the_name_alone():
    from apache_beam.io.filesystem import FileSystem

    for name in (NAME, "out[1]", "x]y[", "a*", "q?"):
        regex = FileSystem.translate_pattern(literal.glob_escape("s3://b/" + name))  # Beam's own reading of it
        with literal._escaped():  # noqa: SLF001 - "[[]": Python's FutureWarning, as in the product
            assert re.match(regex, "s3://b/" + name), name
            assert not re.match(regex, "s3://b/out1") and not re.match(regex, "s3://b/aX")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path)
    return request.getfixturevalue("s3_server").bucket("literal-test")


def _put(path: str, text: str = "x") -> None:
    if "://" not in path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with FileSystems.create(path) as f:
        f.write(text.encode())


def test_listing_and_deleting_a_folder_whose_name_is_a_pattern_leaves_its_siblings(root):
    """``out[1]`` matched ``out1``; ``a*`` matched every sibling starting with ``a``."""
    for sibling in ("out1/manifest.json", "out1/shard-0", "aX/manifest.json"):
        _put(FileSystems.join(root, sibling))
    for folder in ("out[1]", "a*", NAME):
        mine = FileSystems.join(root, folder)
        _put(FileSystems.join(mine, "manifest.json"))
        _put(FileSystems.join(mine, "eval", "shard-0"))
        found = literal.files_below(mine)
        assert [p[len(mine) + 1 :] for p in found] == ["eval/shard-0", "manifest.json"], folder
        literal.delete(found)
        assert literal.files_below(mine) == []
    assert [p[len(root) + 1 :] for p in literal.files_below(root)] == [
        "aX/manifest.json",
        "out1/manifest.json",
        "out1/shard-0",
    ]


def test_the_output_policy_takes_a_pattern_of_a_name_as_a_name(root):
    """A failed ``--overwrite`` run into ``ds[1]`` deleted its partial files by pattern: the sibling ``ds1``'s
    shards of the same names went with them (and on S3 ``ds1``'s files were taken for ``ds[1]``'s)."""
    policy = pretraining.POLICY
    sibling = FileSystems.join(root, "ds1")
    _put(FileSystems.join(sibling, MANIFEST_NAME), json.dumps({"kind": "pretraining"}))
    _put(FileSystems.join(sibling, "pretrain-00000-of-00001.arrow"))
    mine = FileSystems.join(root, "ds[1]")
    _put(FileSystems.join(mine, MANIFEST_NAME), json.dumps({"kind": "pretraining"}))
    with pytest.raises(ZeroDivisionError):  # a run that fails: its partial files go, the earlier dataset comes back
        with O.claim_output(mine, True, policy, {}):
            assert literal.files_below(FileSystems.join(mine, O.WORK_DIR_NAME)) != []
            _put(FileSystems.join(mine, "pretrain-00000-of-00001.arrow"), "partial")
            raise ZeroDivisionError
    if "://" not in root:
        assert not os.path.exists(os.path.join(mine, O.WORK_DIR_NAME))  # removed, not "no files found to delete"
    names = [p[len(root) + 1 :] for p in literal.files_below(root)]
    assert [n for n in names if "/." not in n] == [
        "ds1/manifest.json",
        "ds1/pretrain-00000-of-00001.arrow",
        "ds[1]/manifest.json",
    ]


@pytest.mark.slow
def test_every_bertprep_command_writes_to_an_output_named_like_a_pattern(tmp_path, demo_vocab):
    """Each command that writes a folder, into ``exp[lr=1e-4]*?{a,b}`` beside a sibling its pattern matches
    (pretraining and vocab twice, the second with ``--overwrite``): every run succeeds and the sibling stays."""
    vocab = str(demo_vocab / "vocab.txt")
    corpus = str(shared_path("pretrain", "sample_text.txt"))
    sst2 = str(shared_path("tasks", "sst2", "dev.tsv"))
    conll = tmp_path / "conll.txt"  # the first 200 sentences
    sentences = shared_path("tasks", "conll2003", "valid.txt").read_text(encoding="utf-8").split("\n\n")
    conll.write_text("\n\n".join(sentences[:200]), encoding="utf-8")
    squad = str(shared_path("tasks", "squad_v1.1", "dev-v1.1.json"))
    data = tmp_path / "ds"
    commands = {
        "vocab": ["vocab", "--input", corpus, "--vocab-size", "300"],
        "pretraining": ["pretraining", "--input", corpus, "--vocab", vocab, "--dupe-factor", "1"],
        "classification": ["task", "classification", "--glue", "sst2", "--input", sst2, "--vocab", vocab],
        "ner": ["task", "ner", "--input", str(conll), "--vocab", vocab, "--split", "train"],
        "squad": ["task", "squad", "--input", squad, "--vocab", vocab, "--articles", "0:1"],
        "extract": ["extract", "--input", corpus],
        "demo-corpus": ["demo-corpus"],
    }
    for name, args in commands.items():
        folder = tmp_path / name
        folder.mkdir()
        sibling = folder / "exp[lr=1e-4]-sibling-a"  # what the pattern NAME matches
        sibling.mkdir()
        (sibling / "keep.txt").write_text("mine")
        out = folder / NAME
        for again in ([], ["--overwrite"]) if name in ("pretraining", "vocab") else ([],):
            if name == "demo-corpus":
                r = CliRunner().invoke(main, [*args, str(out)])
            else:
                r = CliRunner().invoke(main, [*args, "--output", str(out), *again])
            assert r.exit_code == 0, (name, again, r.output)
        assert (sibling / "keep.txt").read_text() == "mine", name
        assert sorted(p.name for p in folder.iterdir()) == sorted([NAME, sibling.name]), name
        assert not (out / O.WORK_DIR_NAME).exists() and not (out / O.LOCK_NAME).exists(), name
        if name == "pretraining":
            data = out
    report = tmp_path / "report" / NAME
    for _ in range(2):
        r = CliRunner().invoke(main, ["report", str(data), "--output", str(report)])
        assert r.exit_code == 0, r.output
    assert (report / "index.html").is_file()
