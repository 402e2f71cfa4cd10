"""An output that is a link to nothing (a loop, a missing target) is named: making the folder there failed as
'cannot write to loop: File exists' (bertprep's datasets and vocab) or 'object store or filesystem failed:
.loop.tmp-...: Not a directory' (bertprep report, export-hf)."""

import pytest

from bertstream.cli.errors import UsageError
from bertstream.cli.owned import check_owned
from bertstream.pipelines.common.output_dir import ensure_writable_dir


@pytest.mark.parametrize("target", ["loop", "missing/x"])
def test_an_output_link_to_nothing_is_named(tmp_path, target):
    link = tmp_path / "loop"
    link.symlink_to(tmp_path / target)
    message = f"{link} is a link that leads to no folder (a loop, or a missing target)"
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        check_owned(link, lambda name: True, overwrite=None, what="a report")
    assert e.value.param == "output"
    with pytest.raises(UsageError, match="is a link that leads to no folder"):
        ensure_writable_dir(str(link))


def test_a_link_to_a_folder_is_an_output_as_the_folder_is(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real")
    check_owned(tmp_path / "out", lambda name: True, overwrite=None, what="a report")
    assert ensure_writable_dir(str(tmp_path / "out")) is None
