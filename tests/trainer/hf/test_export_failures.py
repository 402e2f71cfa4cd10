"""export-hf on a full disk is one line, and a kill leaves no hidden temporary folder for good (issue 53)."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

from safetensors.torch import save_file

from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab
from bertstream.trainer.model import BertConfig, BertForPreTraining

CONFIG = BertConfig(vocab_size=64, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


def checkpoint(folder: Path) -> Path:
    folder.mkdir()
    save_file(BertForPreTraining(CONFIG, seed=3).state_dict(), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model": CONFIG.to_dict(), "do_lower_case": True}))
    Vocab((*SPECIAL_TOKENS, *(f"t{i}" for i in range(CONFIG.vocab_size - len(SPECIAL_TOKENS))))).write(
        folder / "vocab.txt"
    )
    return folder


def export(ckpt: Path, out: Path, fsize: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:  # a full disk as the writer meets it: the write fails (EFBIG; ENOSPC alike)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "bertstream.trainer", "export-hf", str(ckpt), str(out)],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=300,
    )


def test_a_full_disk_while_writing_the_export_is_one_line_and_leaves_nothing(tmp_path):
    ckpt = checkpoint(tmp_path / "ckpt")
    done = export(ckpt, tmp_path / "hf", fsize=20_000)  # the weights are ~100 kB
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: cannot write the export to "), lines
    assert "File too large" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no export, no hidden temporary folder


def test_the_temporary_folder_of_a_killed_export_is_removed_by_the_next(tmp_path):
    ckpt = checkpoint(tmp_path / "ckpt")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # a process that has ended: what kill -9 during an export leaves behind
    host = socket.gethostname()
    stale = tmp_path / f".hf.tmp-{dead}-abcdef-{host}"
    running = tmp_path / f".hf.tmp-{os.getpid()}-abcdef-{host}"  # a run writing now
    elsewhere = tmp_path / f".hf.tmp-{dead}-abcdef-{host}x"  # another host's, on a shared file system
    for folder in (stale, running, elsewhere):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    done = export(ckpt, tmp_path / "hf")
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and running.exists() and elsewhere.exists()
    assert (tmp_path / "hf" / "model.safetensors").is_file()
