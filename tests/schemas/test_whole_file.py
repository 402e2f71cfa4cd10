"""Small files read whole go through one capped reader on both sides (issue 53): a FIFO in their place hung the
trainer (the run's lock, --model-config), /dev/zero or an 8 GB file was a MemoryError."""

from __future__ import annotations

import os

import pytest

from bertstream.schemas import whole_file
from bertstream.schemas.vocab import Vocab, VocabError
from bertstream.schemas.whole_file import WholeFileError, read_whole


@pytest.fixture
def odd(tmp_path):
    fifo, zero, big = tmp_path / "fifo.json", tmp_path / "zero.json", tmp_path / "big.json"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    with open(big, "wb") as f:  # 8 GB, sparse: no disk is used, and nothing reads it
        f.truncate(8 << 30)
    return {"fifo": fifo, "zero": zero, "big": big, "folder": tmp_path}


def test_a_fifo_a_device_a_folder_and_a_huge_file_are_refused_unread(odd):
    with pytest.raises(WholeFileError, match=r"^--model-config .*fifo.json is a FIFO \(named pipe\), not a regular"):
        read_whole(odd["fifo"], "--model-config")
    with pytest.raises(WholeFileError, match="zero.json is a device, not a regular file"):
        read_whole(odd["zero"], "--model-config")
    with pytest.raises(WholeFileError, match="is a folder, not a regular file"):
        read_whole(odd["folder"], "--model-config")
    with pytest.raises(WholeFileError, match="big.json holds more than 67108864 bytes, the cap on a file read whole"):
        read_whole(odd["big"], "--model-config")
    with pytest.raises(FileNotFoundError):
        read_whole(odd["folder"] / "missing.json", "--model-config")


def test_the_cap_and_a_url_opener(tmp_path, monkeypatch):
    path = tmp_path / "small.json"
    path.write_bytes(b"{}" * 10)
    assert read_whole(path, "x") == b"{}" * 10
    monkeypatch.setattr(whole_file, "MAX_WHOLE_FILE_BYTES", 16)
    with pytest.raises(WholeFileError, match="holds more than 16 bytes"):
        read_whole(path, "x")
    with pytest.raises(WholeFileError, match="holds more than 16 bytes"):
        read_whole("s3://b/small.json", "x", opener=lambda: open(path, "rb"))


def test_a_vocabulary_that_is_a_fifo_is_a_vocab_error(odd):
    with pytest.raises(VocabError, match="is a FIFO"):
        Vocab.load(odd["fifo"])
