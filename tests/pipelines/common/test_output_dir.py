"""The one ``--output`` policy (``claim_output``): what a folder may hold, the earlier run set aside and brought
back, the work folder and its clean-up, for every command that writes one."""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystems import FileSystems

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import output_dir as O
from bertstream.pipelines.common.dataset import ShardSizing
from bertstream.pipelines.pretraining import pipeline as pretraining
from bertstream.pipelines.tasks import pipeline as tasks
from bertstream.pipelines.vocab import VOCAB_POLICY
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.vocab import VOCAB_FILENAME

POLICY = O.OutputPolicy("test", lambda name: name == MANIFEST_NAME or name.startswith("shard-"))


def test_shard_sizing_clamps_the_count_each_side_asks_for():
    mb = 1 << 20
    assert [pretraining.SHARD_SIZING.num_shards(n * mb) for n in (0, 1, 256, 257, 6400)] == [4, 4, 4, 5, 100]
    assert [tasks.SHARD_SIZING.num_shards(n * mb) for n in (0, 1, 32, 33, 10_000)] == [1, 1, 1, 2, 4]
    with pytest.raises(UsageError, match="at_most: must be >= at_least, got 2"):
        ShardSizing(bytes_per_shard=1, at_least=3, at_most=2)


def _dataset(folder, text: str = "old") -> None:
    for name in (MANIFEST_NAME, VOCAB_FILENAME, "shard-0"):
        (folder / name).write_text(text)


def test_a_folder_with_foreign_files_is_refused_with_or_without_overwrite(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    for overwrite in (False, True):
        with pytest.raises(UsageError, match=r"not a dataset's \(notes.txt\)") as e:
            with O.claim_output(str(tmp_path), overwrite, POLICY, {}):
                pytest.fail("the block must not run")
        assert e.value.param == "output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing made, nothing removed


def test_an_earlier_dataset_needs_overwrite_then_waits_aside_until_the_new_one_is_done(tmp_path):
    _dataset(tmp_path)
    with pytest.raises(UsageError, match="already holds a dataset"):
        with O.claim_output(str(tmp_path), False, POLICY, {}):
            pytest.fail("the block must not run")
    with O.claim_output(str(tmp_path), True, POLICY, {}) as claim:
        assert claim.output_dir == str(tmp_path)
        assert claim.work_dir == os.path.join(str(tmp_path), O.WORK_DIR_NAME, claim.run_id)
        aside = sorted(os.listdir(os.path.join(claim.work_dir, "previous")))
        assert aside == sorted([MANIFEST_NAME, VOCAB_FILENAME, "shard-0"])
        assert sorted(os.listdir(tmp_path)) == [O.LOCK_NAME, O.WORK_DIR_NAME]
        _dataset(tmp_path, "new")
    assert sorted(os.listdir(tmp_path)) == sorted([MANIFEST_NAME, VOCAB_FILENAME, "shard-0"])  # lock, _work gone
    assert (tmp_path / MANIFEST_NAME).read_text() == "new"


def test_a_failed_run_brings_the_earlier_dataset_back_and_removes_its_own_files(tmp_path):
    _dataset(tmp_path)
    with pytest.raises(ZeroDivisionError):
        with O.claim_output(str(tmp_path), True, POLICY, {}):
            (tmp_path / "shard-1").write_text("partial")
            raise ZeroDivisionError
    assert sorted(os.listdir(tmp_path)) == sorted([MANIFEST_NAME, VOCAB_FILENAME, "shard-0"])
    assert (tmp_path / MANIFEST_NAME).read_text() == "old"


def test_a_killed_runs_work_folder_is_emptied_and_a_vocabulary_alone_needs_overwrite(tmp_path):
    (tmp_path / VOCAB_FILENAME).write_text("someone's")
    leftover = tmp_path / O.WORK_DIR_NAME / "20260101T000000-1-abcdef" / "spill-0"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("x")
    # A vocab.txt alone was replaced without a word (issue 53): it is someone's until --overwrite says otherwise.
    with pytest.raises(UsageError, match=r"already holds a vocab.txt \(and no dataset\); pass --overwrite"):
        with O.claim_output(str(tmp_path), False, POLICY, {}):
            pytest.fail("the block must not run")
    assert (tmp_path / VOCAB_FILENAME).read_text() == "someone's" and leftover.exists()
    with O.claim_output(str(tmp_path), True, POLICY, {}) as claim:
        assert os.listdir(os.path.join(str(tmp_path), O.WORK_DIR_NAME)) == [claim.run_id]
    assert not leftover.exists()


def test_a_folder_that_holds_what_the_run_reads_is_refused_before_anything_is_made(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="overlaps inputs: .*corpus.txt lies inside it"):
        with O.claim_output(str(out), True, POLICY, {"input": [str(out / "corpus.txt")]}):
            pytest.fail("the block must not run")
    assert not out.exists()


def test_vocab_owns_its_four_files_only(tmp_path):
    (tmp_path / VOCAB_FILENAME).write_text("old")
    with pytest.raises(UsageError, match="already holds a vocabulary"):
        with O.claim_output(str(tmp_path), False, VOCAB_POLICY, {}):
            pytest.fail("the block must not run")
    (tmp_path / MANIFEST_NAME).write_text("{}")
    with pytest.raises(UsageError, match=r"not a vocabulary's \(manifest.json\)"):
        with O.claim_output(str(tmp_path), True, VOCAB_POLICY, {}):
            pytest.fail("the block must not run")


def test_one_definition_of_the_work_folder_and_one_usage_error():
    import subprocess

    from tests.conftest import REPO

    grep = ["git", "grep", "-n", "-E"]
    work = subprocess.run([*grep, r"= \"_work\"", "--", "*.py"], cwd=REPO, capture_output=True, text=True).stdout
    assert [line.split(":")[0] for line in work.splitlines()] == ["pipelines/common/output_dir.py"]
    classes = subprocess.run([*grep, r"^class (Usage|Config)Error\b", "--", "*.py"], cwd=REPO, capture_output=True)
    assert [line.split(":")[0] for line in classes.stdout.decode().splitlines()] == ["cli/errors.py"]


# On S3 the claim alone makes ~20 filesystem calls, each with its own boto client (~0.5 s): ~15 s, so slow.
@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def output_root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path)
    return request.getfixturevalue("s3_server").bucket("output-test") + "/out"  # tests/s3_server.py: a real S3 API


def _write(root: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        with FileSystems.create(FileSystems.join(root, name)) as f:
            f.write(text.encode())


def _files(root: str) -> dict[str, str]:
    """The run's files below ``root`` (not the lock, not the work folder), by relative path."""
    found = {}
    for r in FileSystems.match([root + "/**"]):
        for m in r.metadata_list:
            rel = m.path[len(root) + 1 :]
            if not rel.startswith((".", O.WORK_DIR_NAME)):
                with FileSystems.open(m.path) as f:
                    found[rel] = f.read().decode()
    return found


def test_a_folder_of_the_earlier_run_is_set_aside_and_brought_back_also_on_an_object_store(output_root):
    """A dataset with a folder of its own (pretraining's ``eval``): an object store renames objects, not folders."""
    policy = O.OutputPolicy("test", lambda name: name in (MANIFEST_NAME, "eval") or name.startswith("shard-"))
    earlier = {MANIFEST_NAME: "old", "eval/manifest.json": "old eval", "eval/shard-0": "s"}
    _write(output_root, earlier)
    with pytest.raises(ZeroDivisionError):
        with O.claim_output(output_root, True, policy, {}):
            assert _files(output_root) == {}  # set aside
            _write(output_root, {"eval/manifest.json": "partial"})
            raise ZeroDivisionError
    assert _files(output_root) == earlier


# ------------------------------------------------------------- issue 53, item 2: nothing of a user's is deleted


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_work_folder_or_file_the_user_made_is_refused_and_kept(tmp_path, overwrite):
    """``OUTPUT/_work`` was emptied as "a killed run's leftovers", whatever it held."""
    folder, file = tmp_path / "folder", tmp_path / "file"
    (folder / O.WORK_DIR_NAME).mkdir(parents=True)
    (folder / O.WORK_DIR_NAME / "notes.txt").write_text("mine")
    file.mkdir()
    (file / O.WORK_DIR_NAME).write_text("mine")
    for out, shown in ((folder, "_work/notes.txt"), (file, "_work")):
        with pytest.raises(UsageError, match=f"holds {shown}, which no bertprep run made"):
            with O.claim_output(str(out), overwrite, POLICY, {}):
                pytest.fail("the block must not run")
    assert (folder / O.WORK_DIR_NAME / "notes.txt").read_text() == "mine"
    assert (file / O.WORK_DIR_NAME).read_text() == "mine"


def test_a_folder_of_the_datasets_name_holding_a_users_files_is_theirs(tmp_path):
    """A user's ``eval/`` (no manifest, their notes) was "leftovers of an unfinished run", removed by --overwrite."""
    policy = O.OutputPolicy("test", lambda name: name in (MANIFEST_NAME, "eval") or name.startswith("shard-"))
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"not a dataset's \(eval/notes.txt\)"):
        with O.claim_output(str(tmp_path), True, policy, {}):
            pytest.fail("the block must not run")
    assert (tmp_path / "eval" / "notes.txt").read_text() == "mine"


def _gone_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _killed_during_overwrite(out, *, restored: tuple[str, ...] = ()) -> dict[str, str]:
    """``out`` as a run killed with SIGKILL during ``--overwrite`` leaves it: the earlier dataset set aside in
    ``_work/RUN/previous`` (``restored``: names already put back by a put-back that was killed too), the killed
    run's partial shard in place, its lock held by a process that is gone. Returns the earlier files."""
    import json
    import socket

    earlier = {MANIFEST_NAME: "old manifest", VOCAB_FILENAME: "old vocab", "shard-0": "old shard"}
    run = "20260101T000000-1-abcdef"
    aside = out / O.WORK_DIR_NAME / run / "previous"
    aside.mkdir(parents=True)
    for name, text in earlier.items():
        (out / name if name in restored else aside / name).write_text(text)
    if restored:
        (out / O.WORK_DIR_NAME / run / O.RESTORING).write_text("")
    else:
        (out / "shard-1").write_text("the killed run's partial shard")
    (out / O.WORK_DIR_NAME / run / "spill-0").write_text("x")
    lock = {"run_id": run, "pid": _gone_pid(), "host": socket.gethostname(), "command": "test"}
    (out / O.LOCK_NAME).write_text(json.dumps(lock))
    return earlier


@pytest.mark.parametrize("restored", [(), ("shard-0",)])
def test_the_dataset_a_killed_overwrite_set_aside_is_put_back_when_its_lock_is_taken_over(tmp_path, capsys, restored):
    """The next run (no --overwrite) took over the stale lock and emptied ``_work``, the earlier dataset in it."""
    earlier = _killed_during_overwrite(tmp_path, restored=restored)
    with pytest.raises(UsageError, match="already holds a dataset"):
        with O.claim_output(str(tmp_path), False, POLICY, {}):
            pytest.fail("the block must not run")
    assert {p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()} == earlier
    err = capsys.readouterr().err
    assert "removing the stale lock of run 20260101T000000-1-abcdef" in err
    assert "put back the earlier dataset that run 20260101T000000-1-abcdef had set aside" in err
    with O.claim_output(str(tmp_path), True, POLICY, {}):  # and --overwrite then replaces it, as it should
        pass
    assert not (tmp_path / O.WORK_DIR_NAME).exists()


def test_an_output_inside_a_dataset_or_a_running_runs_folder_is_refused(tmp_path):
    """Round 8: --output DS/inner wrote a second dataset inside DS (and inside a run still writing DS): the two
    mixed, and DS could no longer be replaced (--overwrite refuses a folder holding another's files)."""
    import json

    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / MANIFEST_NAME).write_text(json.dumps({"kind": "pretraining"}))
    running = tmp_path / "running"
    running.mkdir()
    (running / O.LOCK_NAME).write_text("{}")
    for out in (ds / "inner", ds / "a" / "b", running / "inner"):
        with pytest.raises(UsageError, match="a dataset's folder .* mixed into that dataset") as e:
            with O.claim_output(str(out), False, POLICY, {}):
                pytest.fail("the block must not run")
        assert e.value.param == "output" and not out.exists()
    (tmp_path / "project").mkdir()  # a manifest.json of something else does not count
    (tmp_path / "project" / MANIFEST_NAME).write_text('{"name": "my web app"}')
    with O.claim_output(str(tmp_path / "project" / "out"), False, POLICY, {}):
        pass
