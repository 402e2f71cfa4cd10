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


def test_a_file_written_whole_at_output_is_refused_in_the_owners_words_for_each_command(tmp_path):
    """embed's Arrow file (``OutputFile``, with --overwrite) and plot's figure (``output_file``, replaced only when
    the command drew it) are one policy, said once in cli/owned.py: a folder is never the file, an existing file is
    replaced only with --overwrite (embed) or when it is the command's own (plot)."""
    from bertstream.cli.options import build
    from bertstream.cli.owned import OutputFile, output_file

    class Refused(Exception):  # the command's kind of error (plot's RunError, exit 1)
        pass

    folder, kept = tmp_path / "out", tmp_path / "kept.png"
    folder.mkdir()
    kept.write_bytes(b"someone's photo")
    embed_like = lambda output, **kw: OutputFile(output=str(output), **kw).target([], what="the Arrow file")  # noqa: E731
    plot_like = lambda output, ours: output_file(  # noqa: E731
        output,
        tmp_path / "curves.png",
        suffixes=(".png",),
        ours=ours,
        kind=("the image's file name", "an image file"),
        mine="figure the command drew",
        error=Refused,
    )
    with pytest.raises(UsageError, match="is a folder: --output names the Arrow file") as e:
        embed_like(folder, overwrite=True)
    assert e.value.param == "output"
    with pytest.raises(Refused, match=f"--output {folder} is a folder: give the image's file name"):
        plot_like(folder, lambda path: True)
    with pytest.raises(UsageError, match="exists; pass --overwrite to replace it"):
        embed_like(kept)
    assert embed_like(kept, overwrite=True) == kept
    with pytest.raises(Refused, match="already exists and is no figure the command drew: choose another --output"):
        plot_like(kept, lambda path: False)
    assert plot_like(kept, lambda path: True) == kept
    with pytest.raises(UsageError, match="overlaps inputs: it is \\(or lies inside\\) --input"):
        OutputFile(output=str(folder / "x.arrow")).target([("--input", str(folder))], what="the Arrow file")
    with pytest.raises(UsageError, match="is required"):
        build(OutputFile, output="")
