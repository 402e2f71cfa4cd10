"""Files a command reads whole (``--vocab``, a dataset's ``manifest.json``) are bounded: a FIFO blocked the
reader forever, a link to ``/dev/zero`` read until memory ran out (23 GB in 20 s as ``--vocab``)."""

import os

import pytest

from bertstream.pipelines.common.dataset import load_manifest
from bertstream.pipelines.common.files import InputError, read_whole
from bertstream.pipelines.common.output_place import manifest_kind as _manifest_kind
from bertstream.pipelines.tokenizer.load import load_tokenizer
from bertstream.schemas import whole_file
from bertstream.schemas.manifest import MANIFEST_NAME
from bertstream.schemas.vocab import VocabError


@pytest.fixture
def odd_files(tmp_path):
    """A FIFO and a link to a device, each named manifest.json in its own folder."""
    fifo, device = tmp_path / "fifo", tmp_path / "device"
    fifo.mkdir()
    device.mkdir()
    os.mkfifo(fifo / MANIFEST_NAME)
    (device / MANIFEST_NAME).symlink_to("/dev/zero")
    return {"a FIFO (named pipe)": fifo, "a device": device}


def test_vocab_and_manifest_of_no_regular_file_are_refused_unread(odd_files):
    for kind, folder in odd_files.items():
        path = str(folder / MANIFEST_NAME)
        with pytest.raises(VocabError, match=f"^{path} is {kind.replace('(', '.').replace(')', '.')}, not a regular"):
            load_tokenizer(path)
        with pytest.raises(InputError, match=f"the manifest {path} is {kind[:5]}"):
            load_manifest(str(folder))
        assert _manifest_kind(str(folder)) is None  # an --output folder holding it: refused as a dataset, unread


def test_a_file_past_the_cap_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    assert read_whole(str(path), "--vocab") == path.read_bytes()
    monkeypatch.setattr(whole_file, "MAX_WHOLE_FILE_BYTES", 16)
    with pytest.raises(VocabError, match="holds more than 16 bytes, the cap on a file read whole"):
        load_tokenizer(str(path))


def test_a_url_of_a_scheme_no_filesystem_serves_says_what_to_do():
    """Beam's own words advised 'pip install apache-beam[gcp]' for https:// and foo:// alike (as --vocab, as
    inspect's dataset and --label-set-from); --input already said which package or to download it."""
    with pytest.raises(VocabError, match="^https://h/vocab.txt: https:// paths are not served by any installed"):
        load_tokenizer("https://h/vocab.txt")
    with pytest.raises(InputError, match="^the dataset foo://x/ds: foo:// paths .* download http:// files first"):
        load_manifest("foo://x/ds")
