"""bertprep demo-corpus owns its folder: it wrote its 79 files into any folder (a dataset's too), and a second run
with another --holdout-every left documents in both splits."""

import pytest

from bertstream.cli.errors import UsageError
from bertstream.pipelines.demo_corpus import write_pydoc_corpus


def test_a_rerun_with_another_holdout_leaves_each_document_in_one_split(tmp_path):
    out = tmp_path / "corpus"
    first = write_pydoc_corpus(out, holdout_every=3)
    held = {p.name for p in (out / "heldout").iterdir()}
    assert len(first) == 79 and 0 < len(held) < 79
    write_pydoc_corpus(out, holdout_every=2)
    train = {p.name for p in out.glob("*.txt")}
    held = {p.name for p in (out / "heldout").iterdir()}
    assert not train & held and len(train | held) == 79
    write_pydoc_corpus(out)
    assert len(list(out.glob("*.txt"))) == 79 and not (out / "heldout").exists()


@pytest.mark.parametrize("every", [-1, 1])
def test_a_holdout_that_is_no_split_is_refused(tmp_path, every):
    with pytest.raises(UsageError, match="must be 0 .none. or at least 2") as e:
        write_pydoc_corpus(tmp_path / "c", holdout_every=every)
    assert e.value.param == "holdout_every" and not (tmp_path / "c").exists()


def test_a_folder_of_other_files_is_refused_untouched(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "assert.txt").symlink_to(tmp_path / "manifest.json")  # writing it would follow the link
    with pytest.raises(UsageError, match=r"holds files demo-corpus does not write \(assert.txt, manifest.json\)"):
        write_pydoc_corpus(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assert.txt", "manifest.json"]
    assert (tmp_path / "manifest.json").read_text() == "{}"
